# Datasets (io/dataset/, converters, loader). Unit tests are picked up by ht_unit_tests ([dataset]).
ht_add_mpi_test(mpi_dataset_np2 2 "[dataset]" TIMEOUT 60)
# Real shards through the CLI: prepare -> h5py/h5dump read-back; malformed shards -> exit 2 on every rank.
ht_add_script_test(dataset_prepare_h5py dataset/prepare_roundtrip.py LABELS dataset TIMEOUT 120)
# A generated folder of JPEG/PNG files -> prepare --format imagefolder: ImageFolder's labels, PIL's
# pixels, bad files listed or --strict, 2 ranks = 1 rank, resume after a stop.
ht_add_script_test(dataset_prepare_imagefolder dataset/prepare_imagefolder.py LABELS dataset TIMEOUT 600)
ht_add_script_test(dataset_bad_shards_np2 dataset/bad_shards.py LABELS dataset TIMEOUT 180)
ht_add_script_test(dataset_locked_shard dataset/locked_shard.py LABELS dataset TIMEOUT 180)
# Untrusted HDF5 files vetted in a time-limited child (src/train/file_vetting, hpctrain verify):
# shards that crash or hang HDF5 1.10 -> exit 2 on both ranks naming the file, no core, no leftover.
ht_add_script_test(io_vetting_np2 verify/test_vetting.py LABELS io TIMEOUT 300)
ht_add_script_test(dataset_old_format_np2 dataset/old_format.py LABELS dataset TIMEOUT 240)
