# The command line itself (src/cli/main.cpp, src/train/build_info.cpp).
ht_add_script_test(cli_version cli/test_version.py LABELS cli TIMEOUT 60)
