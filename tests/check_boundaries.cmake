# Fails when a source file crosses a boundary of the architecture: Qt below widgets/ (kernels/,
# engine/); LibTorch in widgets/, kernels/, app/ or the plain-C++ engine libraries (log, io, data,
# common); engine-private headers (model/, train/, run/, ...) in app/ or widgets/, which use the
# engine's public headers (fp4lab/...).
# Usage: cmake -DSOURCE_DIR=<tree> -P check_boundaries.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<source tree>")
endif()

set(_qt_include "#[ \t]*include[ \t]*[<\"](Q[A-Za-z]+|Qt[A-Za-z]*/)")
set(_torch_include "#[ \t]*include[ \t]*[<\"](torch|ATen|c10)/")
# The engine's private concern folders (its public interface is engine/include/fp4lab/).
set(_engine_private_include "#[ \t]*include[ \t]*\"(model|train|run|quant|export|common|log|io|data)/")
set(_hdf5_include "#[ \t]*include[ \t]*[<\"]hdf5")
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
_scan(engine/data "${_torch_include}" "LibTorch in the plain-C++ data library")
_scan(engine/common "${_torch_include}" "LibTorch in fp4lab_common")
_scan(engine/export "${_torch_include}" "LibTorch in the plain-C++ exporters")
_scan(engine/common "${_hdf5_include}" "HDF5 in fp4lab_common")
_scan(app "${_torch_include}" "LibTorch in the app (it uses the engine's public headers)")
_scan(app "${_engine_private_include}" "an engine-private header in the app")
_scan(widgets "${_engine_private_include}" "an engine-private header in the widgets")

if(_violations)
  message(FATAL_ERROR "architecture boundaries crossed:${_violations}\n"
                      "See ../shared/design/architecture.md: keep torch in engine .cpp files, Qt in widgets/ and app/, and have the app and widgets use fp4lab/... headers only.")
endif()
message(STATUS "boundaries respected in ${SOURCE_DIR}")
