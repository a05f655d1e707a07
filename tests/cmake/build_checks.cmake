# Configure-time checks of the build (cmake/): a oneDNN that is not 2.x stops the configuration with
# a clear message (cmake/check_onednn.cmake; fake oneDNN packages in a temporary prefix, configure
# only, about 10 s).
ht_add_script_test(build_onednn_version build/test_onednn_check.sh LABELS build TIMEOUT 300)
