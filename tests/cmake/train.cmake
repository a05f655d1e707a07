# Training through the hpctrain binary (`hpctrain train`), CPU and GPU.

# Multi-rank training behaviour (mpirun): exactness across world sizes, uneven data, failures, NaN.
foreach(t dp_exactness uneven rank_failure nan_skip quick_convergence bad_data test_seams model_mismatch)
  ht_add_script_test(train_${t} train/train_tests.py ARGS ${t} LABELS train TIMEOUT 300)
endforeach()

# GPU training: CPU vs GPU losses, deterministic mode, exact resume, evaluation, gradient accumulation
# and TF32 (skipped without a GPU).
# The shared-GPU check (gpu_train_shared_gpu) is registered in gpu.cmake.
foreach(t cpu_vs_gpu deterministic exact_resume evaluation accumulation tf32)
  ht_add_script_test(gpu_train_${t} gpu/gpu_train.py ARGS ${t} LABELS gpu TIMEOUT 600)
endforeach()
