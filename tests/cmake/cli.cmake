# The command line itself (src/cli/main.cpp, src/train/build_info.cpp).
ht_add_script_test(cli_version cli/test_version.py LABELS cli TIMEOUT 60)
ht_add_script_test(cli_help_matches_docs cli/test_help_docs.py LABELS cli TIMEOUT 60)
# bench train's first and last loss and their bound (a fast but wrong run is not a result).
ht_add_script_test(cli_bench_train_losses cli/test_bench_train_losses.py LABELS cli TIMEOUT 120)
