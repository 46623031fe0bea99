# Decides whether the PyTorch extension (python/, module mla_decode._C) is built: MLA_WITH_PYTHON.
#
# MLA_BUILD_PYTHON=AUTO (default) builds it when CUDA is on and the Python interpreter imports a
# CUDA-enabled torch; ON insists (configure fails with the reason); OFF skips it. Without torch
# nothing changes: configure prints one line and goes on. The interpreter is Python3_EXECUTABLE
# when given, else the first python3 on PATH (the one that will run the tests).
#
# Torch is asked for its folders and flags by cmake/torch_build_info.py rather than through its
# CMake package: the binding is one host-compiled C++ file, and TorchConfig.cmake's CUDA/cuDNN
# detection is a second, fragile copy of what this project already found.
set(MLA_BUILD_PYTHON "AUTO" CACHE STRING
    "Build the PyTorch extension (python/mla_decode): AUTO (when a Python with CUDA torch is found), ON or OFF")
set_property(CACHE MLA_BUILD_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(MLA_WITH_PYTHON OFF)

macro(mla_python_unavailable reason)
  if(MLA_BUILD_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "MLA_BUILD_PYTHON=ON, but ${reason}")
  endif()
  message(STATUS "mla.cpp: Python extension not built: ${reason}")
endmacro()

if(MLA_BUILD_PYTHON STREQUAL "OFF")
  message(STATUS "mla.cpp: Python extension not built (MLA_BUILD_PYTHON=OFF)")
elseif(NOT MLA_WITH_CUDA)
  mla_python_unavailable("CUDA is off")
else()
  if(NOT Python3_EXECUTABLE)
    find_program(MLA_PYTHON_ON_PATH NAMES python3 python NO_CACHE)
    if(MLA_PYTHON_ON_PATH)
      set(Python3_EXECUTABLE "${MLA_PYTHON_ON_PATH}")
    endif()
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(NOT Python3_Interpreter_FOUND)
    mla_python_unavailable("no Python 3 interpreter found")
  else()
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/torch_build_info.py"
      OUTPUT_VARIABLE torch_build_info ERROR_VARIABLE torch_error RESULT_VARIABLE torch_result
      ERROR_STRIP_TRAILING_WHITESPACE)
    if(NOT torch_result EQUAL 0)
      mla_python_unavailable("${Python3_EXECUTABLE}: ${torch_error}")
    else()
      file(WRITE "${CMAKE_BINARY_DIR}/torch_build_info.cmake" "${torch_build_info}")
      include("${CMAKE_BINARY_DIR}/torch_build_info.cmake")
      set(MLA_TORCH_LIBRARIES "")
      foreach(name c10 c10_cuda torch torch_cpu torch_python)
        find_library(MLA_TORCH_LIB_${name} ${name} PATHS "${MLA_TORCH_LIBRARY_DIR}"
                     NO_DEFAULT_PATH NO_CACHE)
        if(MLA_TORCH_LIB_${name})
          list(APPEND MLA_TORCH_LIBRARIES "${MLA_TORCH_LIB_${name}}")
        else()
          set(MLA_TORCH_MISSING_LIBRARY "lib${name}.so")
        endif()
      endforeach()
      find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
      if(MLA_TORCH_MISSING_LIBRARY)
        mla_python_unavailable("${MLA_TORCH_MISSING_LIBRARY} is not in ${MLA_TORCH_LIBRARY_DIR}")
      elseif(NOT Python3_Development.Module_FOUND)
        mla_python_unavailable("${Python3_EXECUTABLE} has no development headers (Python.h)")
      else()
        set(MLA_WITH_PYTHON ON)
        message(STATUS "mla.cpp: Python extension for ${Python3_EXECUTABLE} "
                       "(Python ${Python3_VERSION}, torch ${MLA_TORCH_VERSION})")
      endif()
    endif()
  endif()
endif()
