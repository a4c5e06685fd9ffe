# Fails when a source file crosses a boundary of the architecture: Qt below widgets/ (kernels/,
# engine/), LibTorch in widgets/ or kernels/ or the HDF5 log (engine/log/).
# Usage: cmake -DSOURCE_DIR=<tree> -P check_boundaries.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<source tree>")
endif()

set(_qt_include "#[ \t]*include[ \t]*[<\"](Q[A-Za-z]+|Qt[A-Za-z]*/)")
set(_torch_include "#[ \t]*include[ \t]*[<\"](torch|ATen|c10)/")
set(_violations "")

function(_scan folder pattern what)
  file(GLOB_RECURSE _files LIST_DIRECTORIES false
       "${SOURCE_DIR}/${folder}/*.h" "${SOURCE_DIR}/${folder}/*.hpp" "${SOURCE_DIR}/${folder}/*.cpp"
       "${SOURCE_DIR}/${folder}/*.cu" "${SOURCE_DIR}/${folder}/*.cuh" "${SOURCE_DIR}/${folder}/*.inl")
  foreach(_f IN LISTS _files)
    file(STRINGS "${_f}" _hits REGEX "${pattern}")
    foreach(_h IN LISTS _hits)
      string(STRIP "${_h}" _h)
      file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_f}")
      set(_violations "${_violations}\n  ${_rel}: ${_h}   (${what})")
    endforeach()
  endforeach()
  set(_violations "${_violations}" PARENT_SCOPE)
endfunction()

_scan(kernels "${_qt_include}" "Qt below the GUI layer")
_scan(engine "${_qt_include}" "Qt below the GUI layer")
_scan(kernels "${_torch_include}" "LibTorch in the kernels")
_scan(widgets "${_torch_include}" "LibTorch in the widgets")
_scan(engine/log "${_torch_include}" "LibTorch in the HDF5 log library")
_scan(engine/io "${_torch_include}" "LibTorch in the plain-C++ I/O library")

if(_violations)
  message(FATAL_ERROR "architecture boundaries crossed:${_violations}\n"
                      "See ../shared/design/architecture.md: keep torch in engine .cpp files and Qt in widgets/ and app/.")
endif()
message(STATUS "boundaries respected in ${SOURCE_DIR}")
