# Checkpoints (io/checkpoint/, src/train/checkpoint_manager, checkpoint_schedule, training_state, signals).
# Unit tests: ht_unit_tests [checkpoint].
# Script tests drive the real binary (mostly under mpirun) and read checkpoints back with h5py.
foreach(t exact_resume signals crash_corrupt elastic resume_semantics disk_full run_lock slow_save imagefolder_train)
  ht_add_script_test(ckpt_${t} ckpt/test_${t}.py LABELS ckpt TIMEOUT 300)
endforeach()
# Random SIGKILLs on 2 ranks (docs/testing.md#random-kills): about 1 min of CPU, 3-5 min on a loaded 2-core machine; the time
# limit allows for a loaded machine.
ht_add_script_test(ckpt_random_kill ckpt/test_random_kill.py LABELS ckpt TIMEOUT 600)
# Crafted bad checkpoints (tensor sizes, stored data, model shapes, progress counters): inspect and a
# 2-rank resume under ulimit -v reject each naming the dataset and value, or fall back as documented.
ht_add_script_test(ckpt_bad_checkpoints ckpt/test_bad_checkpoints.py LABELS ckpt TIMEOUT 600)
