# Finds the third-party libraries. On a machine set up by scripts/setup-deps.sh they come from
# Debian packages; on the lent GPU machine (no apt) from a bundle made by
# scripts/gpu/bundle-deps.sh and passed as MLA_DEPS_DIR (headers, and GoogleTest's sources).

find_package(Threads REQUIRED)
find_package(OpenMP COMPONENTS CXX)

function(mla_header_only_fallback target header)
  if(MLA_DEPS_DIR AND EXISTS "${MLA_DEPS_DIR}/include/${header}")
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    target_include_directories(${target} SYSTEM INTERFACE "${MLA_DEPS_DIR}/include")
    message(STATUS "mla.cpp: ${target} from the bundle ${MLA_DEPS_DIR}")
  else()
    message(FATAL_ERROR "${target} not found: run scripts/setup-deps.sh (or pass MLA_DEPS_DIR)")
  endif()
endfunction()

find_package(fmt CONFIG QUIET)
if(NOT fmt_FOUND)
  mla_header_only_fallback(fmt::fmt "fmt/format.h")
  set_property(TARGET fmt::fmt APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endif()

find_package(nlohmann_json CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  mla_header_only_fallback(nlohmann_json::nlohmann_json "nlohmann/json.hpp")
endif()

find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  mla_header_only_fallback(CLI11::CLI11 "CLI/CLI.hpp")
endif()

# PCRE2 10.40 or later (8-bit code units; the tokenizer compiles its regexes with UTF + UCP and
# uses \p{White_Space}): pkg-config on a machine set up by setup-deps.sh, else the library and
# header found on the system or in the bundle (MLA_DEPS_DIR/include, MLA_DEPS_DIR/lib).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET GLOBAL libpcre2-8)
endif()
if(PCRE2_FOUND)
  add_library(PCRE2::pcre2-8 ALIAS PkgConfig::PCRE2)
else()
  find_path(MLA_PCRE2_INCLUDE_DIR pcre2.h HINTS "${MLA_DEPS_DIR}/include")
  find_library(MLA_PCRE2_LIBRARY NAMES pcre2-8 HINTS "${MLA_DEPS_DIR}/lib")
  if(NOT MLA_PCRE2_INCLUDE_DIR OR NOT MLA_PCRE2_LIBRARY)
    message(FATAL_ERROR "PCRE2 (libpcre2-8) not found: run scripts/setup-deps.sh (or pass MLA_DEPS_DIR)")
  endif()
  add_library(PCRE2::pcre2-8 UNKNOWN IMPORTED GLOBAL)
  set_target_properties(PCRE2::pcre2-8 PROPERTIES IMPORTED_LOCATION "${MLA_PCRE2_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${MLA_PCRE2_INCLUDE_DIR}")
  message(STATUS "mla.cpp: PCRE2 at ${MLA_PCRE2_LIBRARY}")
endif()

# cpp-httplib (the server, `mla serve`): Debian ships it as a compiled library whose header must
# be read with the same feature macros (pkg-config's cflags). The GPU machine's bundle has
# instead upstream's single header of the same version, used header-only with no feature macro
# (no TLS, zlib or Brotli, which the server does not use). Without either, everything but the
# server builds.
set(MLA_WITH_SERVER OFF)
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
endif()
if(HTTPLIB_FOUND)
  add_library(httplib::httplib ALIAS PkgConfig::HTTPLIB)
  set(MLA_WITH_SERVER ON)
elseif(MLA_DEPS_DIR AND EXISTS "${MLA_DEPS_DIR}/include/httplib.h")
  add_library(httplib::httplib INTERFACE IMPORTED GLOBAL)
  target_include_directories(httplib::httplib SYSTEM INTERFACE "${MLA_DEPS_DIR}/include")
  target_link_libraries(httplib::httplib INTERFACE Threads::Threads)
  set(MLA_WITH_SERVER ON)
  message(STATUS "mla.cpp: cpp-httplib (single header) from the bundle ${MLA_DEPS_DIR}")
else()
  message(STATUS "mla.cpp: cpp-httplib not found: building without the server (mla serve)")
endif()

if(MLA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    if(MLA_DEPS_DIR AND EXISTS "${MLA_DEPS_DIR}/googletest/CMakeLists.txt")
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
      add_subdirectory("${MLA_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
      message(STATUS "mla.cpp: GoogleTest from the bundle ${MLA_DEPS_DIR}")
    else()
      message(FATAL_ERROR "GoogleTest not found: run scripts/setup-deps.sh (or pass MLA_DEPS_DIR)")
    endif()
  endif()
  include(GoogleTest)
endif()

# CUTLASS/CuTe headers (the nvidia-cutlass wheel); optional until a kernel needs them.
if(MLA_WITH_CUDA)
  set(MLA_CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include folder (holds cute/ and cutlass/)")
  if(NOT MLA_CUTLASS_INCLUDE_DIR)
    if(MLA_DEPS_DIR AND EXISTS "${MLA_DEPS_DIR}/cutlass/include/cute")
      set(MLA_CUTLASS_INCLUDE_DIR "${MLA_DEPS_DIR}/cutlass/include" CACHE PATH "" FORCE)
    else()
      find_package(Python3 COMPONENTS Interpreter QUIET)
      if(Python3_FOUND)
        execute_process(
          COMMAND "${Python3_EXECUTABLE}" -c
                  "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
          OUTPUT_VARIABLE _cutlass_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        if(_cutlass_dir AND EXISTS "${_cutlass_dir}/cute")
          set(MLA_CUTLASS_INCLUDE_DIR "${_cutlass_dir}" CACHE PATH "" FORCE)
        endif()
      endif()
    endif()
  endif()
  if(MLA_CUTLASS_INCLUDE_DIR)
    message(STATUS "mla.cpp: CUTLASS headers at ${MLA_CUTLASS_INCLUDE_DIR}")
  else()
    message(STATUS "mla.cpp: CUTLASS headers not found (pip install --no-deps nvidia-cutlass)")
  endif()
endif()
