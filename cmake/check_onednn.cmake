# Stops the configuration when the oneDNN found is not 2.x. src/ops uses oneDNN's v2 API (the
# operation descriptors, e.g. convolution_forward::desc, removed in oneDNN 3.0), so with a 3.x
# oneDNN (Ubuntu 24.04's libdnnl-dev is 3.1.1) the build would fail deep in src/ops with compile
# errors; this says why before anything compiles. The version is read from the dnnl_version.h that
# the DNNL::dnnl target compiles against (the header decides the API, whatever the package claims);
# the config's dnnl_VERSION only where no header is found.
# Included by CMakeLists.txt after find_package(dnnl); tested by tests/build/test_onednn_check.sh.
set(ht_dnnl_header "")
get_target_property(ht_dnnl_incs DNNL::dnnl INTERFACE_INCLUDE_DIRECTORIES)
foreach(d IN LISTS ht_dnnl_incs)
  if(EXISTS "${d}/oneapi/dnnl/dnnl_version.h")
    cmake_path(SET ht_dnnl_header NORMALIZE "${d}/oneapi/dnnl/dnnl_version.h")
    break()
  endif()
endforeach()
if(ht_dnnl_header)
  file(STRINGS "${ht_dnnl_header}" ht_dnnl_defs REGEX "^#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "DNNL_VERSION_${part} +([0-9]+)" _m "${ht_dnnl_defs}")
    set(ht_dnnl_${part} "${CMAKE_MATCH_1}")
  endforeach()
  set(HT_ONEDNN_VERSION "${ht_dnnl_MAJOR}.${ht_dnnl_MINOR}.${ht_dnnl_PATCH}")
  set(ht_dnnl_where "${ht_dnnl_header}")
else()
  set(HT_ONEDNN_VERSION "${dnnl_VERSION}")
  string(REGEX MATCH "^[0-9]+" ht_dnnl_MAJOR "${dnnl_VERSION}")
  set(ht_dnnl_where "${dnnl_DIR} (no oneapi/dnnl/dnnl_version.h in the include directories '${ht_dnnl_incs}')")
endif()
if(NOT ht_dnnl_MAJOR STREQUAL "2")
  message(FATAL_ERROR
    "hpctrain needs oneDNN 2.x (its v2 API: src/ops uses the operation descriptors that oneDNN 3.0 "
    "removed; Debian 12's libdnnl-dev 2.6.3 is the tested one), but found oneDNN "
    "'${HT_ONEDNN_VERSION}' in ${ht_dnnl_where}.\n"
    "What to do: build on a distribution that ships oneDNN 2.x (Debian 12), or install Debian 12's "
    "libdnnl2 and libdnnl-dev 2.6.3-1 packages (containers/onednn.sh debian12 does, SHA256-checked; the "
    "container recipe's default ONEDNN=auto uses them where the distribution's oneDNN is 3.x), or install oneDNN 2.x "
    "yourself (e.g. the v2.7.5 release of https://github.com/oneapi-src/oneDNN: cmake -DDNNL_BUILD_TESTS=OFF "
    "-DDNNL_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX=/opt/onednn2, then cmake --install) and configure "
    "with -Ddnnl_DIR=/opt/onednn2/lib/cmake/dnnl (see docs/containers.md for the GPU image).")
endif()
message(STATUS "hpctrain: oneDNN ${HT_ONEDNN_VERSION} (${ht_dnnl_where})")
