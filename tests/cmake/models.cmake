# Models against PyTorch (Debian's python3-torch/torchvision) on the same weights: logits, loss,
# every gradient and the BatchNorm running statistics (tests/python/torch_crosscheck.sh).
add_test(NAME torch_crosscheck
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/torch_crosscheck.sh $<TARGET_FILE:ht_unit_tests>
                 resnet18_cifar resnet18 fmnist_cnn mlp)
set_tests_properties(torch_crosscheck PROPERTIES LABELS "torch" TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2")
# The convolution fast-path check (src/ops/conv2d.cpp, docs/precision.md#convolution-plans): a test
# fault makes Winograd's backward-data result 1e-3 off in the check; that pass, only it, falls back.
add_test(NAME conv2d_fast_path_fallback COMMAND $<TARGET_FILE:ht_unit_tests> "[.conv_fault]")
set_tests_properties(conv2d_fast_path_fallback PROPERTIES LABELS "unit" TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;HT_TEST_FAULTS=conv.fast_path_error=backward_data")
