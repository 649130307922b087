# Precompiled headers (KILN_PCH, on by default): each big library precompiles
# the third-party and standard headers nearly all of its files include, so
# they are parsed once per library instead of once per file. protobuf's
# headers (through framework/proto/framework.pb.h, in 9 files of 10) were
# half the front end's time in a typical file; the Python bindings add
# pybind11 and Python.h, the ONNX importer onnx.pb.h. Building kiln and
# kiln_python (gcc 12, Release, 2 cores) took about 500 CPU-seconds without
# them and about 390 with them.
#
# Only stable headers from outside kiln go in, never kiln's own: a change to a
# kiln header rebuilds the files that include it, not a whole library, and a
# file that forgets to include a kiln header still fails to compile. A
# forgotten standard or protobuf include can hide behind the PCH: the TSan
# build (tools/sanitizer_builds.sh) uses KILN_PCH=OFF and shows it. The
# headers are PRIVATE to each library: nothing reaches what links it.
#
# gcc 12 and clang 14 both work. With ccache as the compiler launcher, ccache
# needs `sloppiness = pch_defines,time_macros` (ccache --set-config) to cache
# the files that use a PCH; without it it compiles them every time.
option(KILN_PCH "Precompile the heavy third-party headers of the big libraries" ON)

# What nearly every file of framework/, compiler/, passes/, tools/ includes:
# framework.pb.h's protobuf headers and the standard library around them.
set(KILN_PCH_COMMON
  <google/protobuf/arena.h>
  <google/protobuf/arenastring.h>
  <google/protobuf/extension_set.h>
  <google/protobuf/generated_enum_reflection.h>
  <google/protobuf/generated_message_reflection.h>
  <google/protobuf/generated_message_util.h>
  <google/protobuf/io/coded_stream.h>
  <google/protobuf/message.h>
  <google/protobuf/metadata_lite.h>
  <google/protobuf/repeated_field.h>
  <google/protobuf/unknown_field_set.h>
  <algorithm>
  <cmath>
  <cstdint>
  <cstring>
  <functional>
  <limits>
  <map>
  <memory>
  <optional>
  <set>
  <sstream>
  <string>
  <string_view>
  <unordered_map>
  <utility>
  <variant>
  <vector>
)

# kiln_precompile_headers(target [header...]): the target's files are compiled
# with the given headers, then KILN_PCH_COMMON, precompiled (the given ones
# first: Python.h must come before the standard headers).
function(kiln_precompile_headers target)
  if(KILN_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN} ${KILN_PCH_COMMON})
  endif()
endfunction()

# ccache without pch_defines compiles every file that uses a PCH ("could not
# use precompiled header" in ccache -sv): say so once, at configure time.
if(KILN_PCH AND CMAKE_CXX_COMPILER_LAUNCHER)
  list(GET CMAKE_CXX_COMPILER_LAUNCHER 0 _kiln_launcher)
  get_filename_component(_kiln_launcher_name "${_kiln_launcher}" NAME)
  if(_kiln_launcher_name STREQUAL "ccache")
    execute_process(COMMAND "${_kiln_launcher}" --get-config sloppiness
                    OUTPUT_VARIABLE _kiln_sloppiness OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    string(REPLACE " " "" _kiln_sloppiness "${_kiln_sloppiness}")
    set(_kiln_wanted "${_kiln_sloppiness}")
    foreach(_kiln_s pch_defines time_macros)
      if(NOT _kiln_wanted MATCHES "${_kiln_s}")
        string(APPEND _kiln_wanted ",${_kiln_s}")
      endif()
    endforeach()
    string(REGEX REPLACE "^," "" _kiln_wanted "${_kiln_wanted}")
    if(NOT _kiln_wanted STREQUAL _kiln_sloppiness)
      message(WARNING "KILN_PCH with ccache: without sloppiness pch_defines,time_macros ccache caches none "
                      "of the files that use a precompiled header. "
                      "ccache --set-config sloppiness=${_kiln_wanted} adds them; -DKILN_PCH=OFF turns the PCH off.")
    endif()
  endif()
endif()
