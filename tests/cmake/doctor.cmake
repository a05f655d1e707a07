# Doctor, device binding, GPU environment probing, NVML monitor, trace, PyTorch interop (issue 7).
# A fake NVIDIA driver library (tests/doctor/fake_driver.c) lets the dlopen paths of cuda/gpu_env.cpp and
# cuda/nvml_monitor.cpp run on machines without a GPU; tests find it through HT_FAKE_DRIVER.
add_library(ht_fake_driver SHARED ${CMAKE_CURRENT_SOURCE_DIR}/doctor/fake_driver.c)
set_target_properties(ht_fake_driver PROPERTIES OUTPUT_NAME ht_fake_driver)
add_dependencies(ht_unit_tests ht_fake_driver)
target_compile_definitions(ht_unit_tests PRIVATE HT_FAKE_DRIVER="$<TARGET_FILE:ht_fake_driver>")
add_dependencies(ht_mpi_tests ht_fake_driver hpctrain)

ht_add_mpi_test(trace_np2 2 "[trace]" LABELS doctor TIMEOUT 120)
ht_add_script_test(doctor_np2 doctor/test_doctor.py LABELS doctor TIMEOUT 180
                   ARGS $<TARGET_FILE:ht_fake_driver>)
ht_add_script_test(interop_torch interop/test_interop.py ARGS $<TARGET_FILE:ht_unit_tests> LABELS interop TIMEOUT 300)
# Fine-tuning an RGB ResNet-18 on gray data (issue 23): import_torch.py --channels 1 sums conv1 over RGB (exact to 1e-12 in
# float64, our logits vs PyTorch's RGB model), hpctrain train --init-from --reset-head on 1x28x28,
# configs/finetune_resnet18_fmnist.ini. About 45 s.
ht_add_script_test(interop_finetune_gray interop/test_finetune_gray.py ARGS $<TARGET_FILE:ht_unit_tests> LABELS interop TIMEOUT 300)
target_compile_definitions(ht_mpi_tests PRIVATE HT_FAKE_DRIVER="$<TARGET_FILE:ht_fake_driver>")
ht_add_mpi_test(binding_np2 2 "[binding_mpi]" LABELS doctor TIMEOUT 120)
ht_add_script_test(trace_train_np2 doctor/test_trace_train.py LABELS doctor TIMEOUT 240)
