# Models against PyTorch (Debian's python3-torch/torchvision) on the same weights: logits, loss,
# every gradient and the BatchNorm running statistics (tests/python/torch_crosscheck.sh).
add_test(NAME torch_crosscheck
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/torch_crosscheck.sh $<TARGET_FILE:ht_unit_tests>
                 resnet18_cifar resnet18 fmnist_cnn mlp)
set_tests_properties(torch_crosscheck PROPERTIES LABELS "torch" TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2")
