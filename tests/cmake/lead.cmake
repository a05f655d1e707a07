# Models against PyTorch (Debian's python3-torch/torchvision) on the same weights.
add_test(NAME torch_crosscheck
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/torch_crosscheck.sh $<TARGET_FILE:ht_unit_tests>
                 resnet18_cifar resnet18 fmnist_cnn mlp)
set_tests_properties(torch_crosscheck PROPERTIES LABELS "torch" TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2")

# Multi-rank training behaviour (mpirun): exactness across world sizes, uneven data, failures, NaN.
foreach(t dp_exactness uneven rank_failure nan_skip quick_convergence bad_data test_seams)
  ht_add_script_test(train_${t} train/train_tests.py ARGS ${t} LABELS train TIMEOUT 300)
endforeach()

# GPU training: CPU vs GPU losses, deterministic mode, exact resume (skipped without a GPU).
foreach(t cpu_vs_gpu deterministic exact_resume)
  ht_add_script_test(gpu_train_${t} gpu/gpu_train.py ARGS ${t} LABELS gpu TIMEOUT 600)
endforeach()
