// hpctrain inspect PATH | --validate DIR [--split train|test|all] | --flight RUN_DIR
//   PATH a dataset shard: its schema (datasets, shapes, dtypes, chunking, filters, root attributes),
//   then statistics (label histogram, per-channel pixel mean/std) and the reader's validation.
//   PATH a checkpoint (root attribute format = "hpctrain-checkpoint"): handed to the checkpoint code.
//   PATH a directory, or --validate DIR: opens every shard of the split(s) exactly as training does
//   and prints a summary. Every rank validates; all agree on the exit code (2 for an invalid dataset,
//   with the message on every rank), so `mpirun -np N hpctrain inspect --validate DIR` never hangs.
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/h5_check.hpp"
#include "io/checkpoint/checkpoint_store.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "mpi/dist.hpp"
#include "mpi/flight_report.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "src/train/file_vetting.hpp"

namespace fs = std::filesystem;

namespace ht {

namespace {

std::string type_name(hid_t t) {
  switch (H5Tget_class(t)) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(H5Tget_size(t) * 8);
    case H5T_FLOAT: return "float" + std::to_string(H5Tget_size(t) * 8);
    case H5T_STRING: return H5Tis_variable_str(t) > 0 ? "string (variable length)" : "string[" + std::to_string(H5Tget_size(t)) + "]";
    case H5T_COMPOUND: return "compound";
    case H5T_ARRAY: return "array";
    case H5T_ENUM: return "enum";
    default: return "other";
  }
}

std::string space_str(hid_t space) {
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd <= 0) return "scalar";
  std::vector<hsize_t> d(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  std::string s = "[";
  for (int i = 0; i < nd; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string attr_value(hid_t obj, const char* name, hid_t type, hid_t space) {
  std::ostringstream o;
  hssize_t n = H5Sget_simple_extent_npoints(space);
  const hssize_t show = std::min<hssize_t>(n, 16);
  H5T_class_t c = H5Tget_class(type);
  if (c == H5T_STRING) {
    std::vector<std::string> v;
    if (!h5_read_attr_strings(obj, name, v)) return "(unreadable)";
    if (n == 1 && H5Sget_simple_extent_ndims(space) == 0) return "\"" + v[0] + "\"";
    o << "[";
    for (hssize_t i = 0; i < show; ++i) o << (i ? ", " : "") << "\"" << v[static_cast<size_t>(i)] << "\"";
    if (n > show) o << ", ...";
    o << "]";
  } else if (c == H5T_INTEGER || c == H5T_FLOAT) {
    std::vector<double> v(static_cast<size_t>(std::max<hssize_t>(n, 1)));
    H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    if (H5Aread(a, H5T_NATIVE_DOUBLE, v.data()) < 0) return "(unreadable)";
    if (n == 1 && H5Sget_simple_extent_ndims(space) == 0) {
      o << v[0];
    } else {
      o << "[";
      for (hssize_t i = 0; i < show; ++i) o << (i ? ", " : "") << v[static_cast<size_t>(i)];
      if (n > show) o << ", ...";
      o << "]";
    }
  } else {
    o << "(" << type_name(type) << ")";
  }
  return o.str();
}

herr_t print_attr(hid_t obj, const char* name, const H5A_info_t*, void*) {
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return 0;
  H5Handle t(H5Aget_type(a), H5Tclose);
  H5Handle s(H5Aget_space(a), H5Sclose);
  log_raw_out(strf("    %-12s %-24s %-8s = %s", name, type_name(t).c_str(), space_str(s).c_str(),
                   attr_value(obj, name, t, s).c_str()));
  return 0;
}

herr_t print_link(hid_t group, const char* name, const H5L_info_t*, void*) {
  H5O_info_t oi;
  if (H5Oget_info_by_name(group, name, &oi, H5P_DEFAULT) < 0) return 0;
  if (oi.type == H5O_TYPE_GROUP) {
    log_raw_out(strf("  /%s: group", name));
    return 0;
  }
  if (oi.type != H5O_TYPE_DATASET) {
    log_raw_out(strf("  /%s: (other object)", name));
    return 0;
  }
  H5Handle d(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) {
    log_raw_out(strf("  /%s: dataset (cannot open)", name));
    return 0;
  }
  H5Handle t(H5Dget_type(d), H5Tclose);
  H5Handle s(H5Dget_space(d), H5Sclose);
  H5Handle p(H5Dget_create_plist(d), H5Pclose);
  std::string layout = "contiguous";
  if (H5Pget_layout(p) == H5D_CHUNKED) {
    hsize_t cd[32];
    int nd = H5Pget_chunk(p, 32, cd);
    layout = "chunks [";
    for (int i = 0; i < nd; ++i) layout += (i ? ", " : "") + std::to_string(cd[i]);
    layout += "]";
  } else if (H5Pget_layout(p) == H5D_COMPACT) {
    layout = "compact";
  }
  int nf = H5Pget_nfilters(p);
  std::string filters;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cv[8];
    size_t ncv = 8;
    char fname[64] = {0};
    H5Pget_filter2(p, static_cast<unsigned>(i), &flags, &ncv, cv, sizeof fname, fname, nullptr);
    filters += std::string(filters.empty() ? "" : ", ") + fname;
  }
  log_raw_out(strf("  /%s: %s %s, %s, filters: %s, %llu bytes stored", name, type_name(t).c_str(), space_str(s).c_str(),
                   layout.c_str(), filters.empty() ? "none" : filters.c_str(),
                   static_cast<unsigned long long>(H5Dget_storage_size(d))));
  return 0;
}

void print_schema(const std::string& path, hid_t file) {
  log_raw_out(strf("%s (%llu bytes)", path.c_str(), static_cast<unsigned long long>(fs::file_size(path))));
  log_raw_out("  datasets:");
  hsize_t idx = 0;
  H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &idx, print_link, nullptr);
  log_raw_out("  root attributes:");
  hsize_t aidx = 0;
  H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, &aidx, print_attr, nullptr);
}

void print_statistics(Dataset& ds) {
  const DatasetInfo& info = ds.info();
  const int C = info.channels;
  const size_t sample = static_cast<size_t>(info.height) * info.width * C;
  std::vector<int64_t> hist(static_cast<size_t>(info.num_classes), 0);
  std::vector<double> s(static_cast<size_t>(C), 0.0), s2(static_cast<size_t>(C), 0.0);
  const int64_t chunk = 4096;
  std::vector<int64_t> idx;
  std::vector<uint8_t> img;
  std::vector<int32_t> lab;
  for (int64_t b = 0; b < info.num_samples; b += chunk) {
    int64_t e = std::min(info.num_samples, b + chunk);
    idx.resize(static_cast<size_t>(e - b));
    for (int64_t i = b; i < e; ++i) idx[static_cast<size_t>(i - b)] = i;
    img.resize(idx.size() * sample);
    lab.resize(idx.size());
    ds.read(idx, img, lab);
    for (int32_t l : lab) hist[static_cast<size_t>(l)]++;
    for (size_t i = 0; i < img.size(); ++i) {
      double x = img[i] / 255.0;
      s[i % C] += x;
      s2[i % C] += x * x;
    }
  }
  log_raw_out(strf("  statistics over %lld samples:", static_cast<long long>(info.num_samples)));
  log_raw_out("    label histogram:");
  for (int k = 0; k < info.num_classes; ++k)
    log_raw_out(strf("      %3d %-16s %8lld", k, info.class_names[static_cast<size_t>(k)].c_str(),
                     static_cast<long long>(hist[static_cast<size_t>(k)])));
  double per = static_cast<double>(info.num_samples) * info.height * info.width;
  for (int c = 0; c < C; ++c) {
    double m = per > 0 ? s[c] / per : 0.0;
    double sd = per > 0 ? std::sqrt(std::max(0.0, s2[c] / per - m * m)) : 0.0;
    log_raw_out(strf("    pixel channel %d: mean %.6f std %.6f (attributes: mean %.6f std %.6f)", c, m, sd,
                     info.mean[static_cast<size_t>(c)], info.std[static_cast<size_t>(c)]));
  }
}

// Returns the exit code; prints on rank 0 only (every rank validates).
int inspect_file(const std::string& path) {
  std::string format;
  {
    H5Section quiet;  // the HDF5 lock, and HDF5's own error printing off
    if (fs::exists(path) && fs::file_size(path) > 0 && H5Fis_hdf5(path.c_str()) > 0) {
      H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
      if (f.valid()) {
        h5_read_attr_string(f, "format", format);
        if (format != "hpctrain-checkpoint" && dist().rank == 0) print_schema(path, f);
      }
    }
  }
  // A checkpoint by its format attribute, or by its name when it cannot even be opened (truncated).
  if (format == "hpctrain-checkpoint" ||
      (format.empty() && checkpoint_step_from_name(fs::path(path).filename().string()) >= 0)) {
    // Checkpoint files: io/checkpoint/checkpoint_read.cpp reads every dataset back (fletcher32) and prints the summary.
    if (dist().rank != 0) {  // every rank validates; rank 0 prints
      try {
        read_checkpoint_file(path);
        return kExitOk;
      } catch (const UsageError&) {
        return kExitUsage;
      }
    }
    return inspect_checkpoint(path);
  }
  // Not a checkpoint: a dataset shard. open_dataset_shard names the problem when it is not a valid one.
  auto ds = open_dataset_shard(path);
  if (dist().rank == 0) {
    print_statistics(*ds);
    log_raw_out("  valid hpctrain-dataset shard");
  }
  return kExitOk;
}

/// A run directory (it has checkpoints/ or metrics.jsonl): its checkpoints with their steps and
/// sizes, and which one LATEST names (a dataset directory is validated instead).
bool is_run_dir(const std::string& dir) {
  return fs::is_directory(fs::path(dir) / "checkpoints") || fs::exists(fs::path(dir) / "metrics.jsonl");
}

int inspect_run_dir(const std::string& dir) {
  if (dist().rank != 0) return kExitOk;
  std::string out = "run directory " + dir + "\n";
  for (const char* f : {"config.ini", "metrics.jsonl", "LATEST", "trace.json"})
    out += std::string("  ") + f + ": " + (fs::exists(fs::path(dir) / f) ? "present" : "absent") + "\n";
  if (fs::is_directory(fs::path(dir) / "flight"))
    out += "  flight/: flight records (written at a time-out, a fatal error or a stop signal); lined up by: "
           "hpctrain inspect --flight " + dir + "\n";
  std::string latest;
  if (std::ifstream in(fs::path(dir) / "LATEST"); in) std::getline(in, latest);
  const auto saved = list_checkpoints(dir);
  out += "  checkpoints (" + std::to_string(saved.size()) + "):\n";
  for (const auto& [step, path] : saved) {
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    char line[512];
    std::snprintf(line, sizeof line, "    step %8lld  %8.1f MiB  %s%s\n", static_cast<long long>(step),
                  ec ? 0.0 : double(bytes) / (1 << 20), path.c_str(),
                  !latest.empty() && fs::path(path).filename() == fs::path(latest).filename() ? "  <- LATEST" : "");
    out += line;
  }
  if (saved.empty()) out += "    none\n";
  out += "  details of one: hpctrain inspect " + (saved.empty() ? dir + "/checkpoints/step-N.h5" : saved.back().second) +
         "; plots and a summary: hpctrain report " + dir + "\n";
  log_raw_out(out);
  return kExitOk;
}

int validate_dir(const std::string& dir, const std::string& split) {
  std::vector<std::string> splits;
  if (split == "all") splits = {"train", "test"};
  else if (split == "train" || split == "test") splits = {split};
  else throw UsageError("hpctrain inspect: --split '" + split + "': expected train, test or all");
  std::vector<DatasetInfo> infos;
  for (auto& sp : splits) {
    auto ds = open_sharded_dataset(dir, sp);
    const DatasetInfo& i = ds->info();
    infos.push_back(i);
    if (infos.size() == 2) check_splits_agree(infos[0], infos[1]);  // train, then test
    if (dist().rank == 0) {
      std::string line = strf("%s/%s: %lld samples, %dx%dx%d (HxWxC), %d classes, mean", dir.c_str(), sp.c_str(),
                              static_cast<long long>(i.num_samples), i.height, i.width, i.channels, i.num_classes);
      for (float m : i.mean) line += strf(" %.4f", m);
      line += " std";
      for (float s : i.std) line += strf(" %.4f", s);
      log_raw_out(line + ", source: " + i.source);
    }
  }
  if (dist().rank == 0) log_raw_out(strf("dataset %s: valid", dir.c_str()));
  return kExitOk;
}

}  // namespace

bool inspect_reads_files_only(const Args& args) {
  for (const std::string& a : args)
    for (const char* opt : {"--flight", "--failed-hosts"})
      if (a == opt || a.rfind(std::string(opt) + "=", 0) == 0) return true;
  return false;
}

int cmd_inspect(const Args& args) {
  std::string validate, split = "all", flight, failed;
  VetOptions vet;
  std::vector<std::string> paths;
  CommandLine cl("hpctrain inspect",
                 "usage: hpctrain inspect PATH                         summarise a dataset shard or checkpoint\n"
                 "       hpctrain inspect --validate DIR [--split S]   validate a dataset directory (S: train, test, all)\n"
                 "       hpctrain inspect --flight RUN_DIR             line up the ranks' flight records after a failure\n"
                 "       hpctrain inspect --failed-hosts RUN_DIR       the hosts the latest failure names: HOST<tab>CAUSE lines");
  cl.option("validate", &validate, "DIR", "validate the dataset directory DIR")
      .option("flight", &flight, "RUN_DIR", "line up the ranks' flight records in RUN_DIR/flight (docs/exit_codes.md)")
      .option("failed-hosts", &failed, "RUN_DIR",
              "hosts to leave out of a relaunch: lost peers and a slow rank's host (docs/slurm.md#restarts)")
      .option("split", &split, "S", "split to validate: train, test or all")
      .option("verify-timeout-s", &vet.timeout_s, "S", "time limit of the vetting of each file (docs/verify.md)")
      .positional("PATH", &paths, 1);
  if (!cl.parse(args)) return kExitOk;
  const std::string path = paths.empty() ? "" : paths[0];
  if (!failed.empty()) {  // files only (main.cpp runs it without MPI); nothing printed when none is named
    std::string out;
    for (const FailedHost& f : failed_hosts(failed)) out += f.host + "\t" + f.cause + "\n";
    if (!out.empty() && dist().rank == 0) log_raw_out(out.substr(0, out.size() - 1));
    return kExitOk;
  }
  if (!flight.empty()) {  // files only, no MPI exchange: every rank reads (so all fail alike), rank 0 prints
    const std::string report = flight_report(flight);
    if (dist().rank == 0) log_raw_out(report);
    return kExitOk;
  }
  if (path.empty() && validate.empty()) cl.fail("PATH or --validate DIR required");
  if (!(vet.timeout_s > 0)) cl.fail("--verify-timeout-s must be positive");
  if (!path.empty() && fs::is_directory(path) && validate.empty() && is_run_dir(path)) return inspect_run_dir(path);
  if (!path.empty() && fs::is_directory(path)) validate = path;

  // Every rank runs the same checks; the outcome is agreed so all ranks exit together with one code
  // (a plain throw on one rank would end in MPI_Abort and could cut other ranks' messages short).
  int code = kExitOk;
  std::string msg;
  try {
    // Vetted in child processes first (src/train/file_vetting.hpp): HDF5 may crash or loop on a
    // corrupt file, and that must end a child, not this command. Collective. A rejected file is not
    // opened here at all (HDF5 1.10 may leave its library unclosable after a failed read).
    try {
      vet_files_collective(!validate.empty() ? dataset_shard_files(validate) : std::vector<std::string>{path}, vet);
    } catch (const CollectiveUsageError& e) {
      throw UsageError(std::string("FAILED: ") + e.what());
    }
    code = !validate.empty() ? validate_dir(validate, split) : inspect_file(path);
  } catch (...) {
    code = exit_code_of(std::current_exception(), msg);
  }
  int worst = static_cast<int>(dist_max(code));
  if (code != kExitOk && !msg.empty())
    log_usage_error(msg);
  else if (worst != kExitOk && code == kExitOk)
    log_usage_error("inspect failed on another rank");
  return std::max(worst, code);
}

}  // namespace ht
