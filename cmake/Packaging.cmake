# The fp4lab .deb: `cpack -G DEB` in a build folder (tests/packaging/test_deb_package.sh checks
# it). Installs the executable, its desktop entry, icon and AppStream metadata, the shipped
# models, and the LibTorch libraries it runs on.
include(GNUInstallDirs)

set(FP4LAB_APP_ID org.fp4lab.Workbench)
set(_fp4lab_pkg_prefix /usr)

# The engine finds its shipped model next to the executable (<bin>/../share/fp4lab,
# engine/run/model_source.cpp), so the package may install under /usr whatever the build's prefix.

# LibTorch comes from the torch wheel in a virtual environment that a user's machine does not
# have, and no Debian package provides it (nor the CUDA libraries the wheel's libtorch_cuda.so
# needs, which the loader must find even though fp4lab computes on the CPU). So the package
# carries them: every library the loader resolves outside the system's library folders goes,
# flat, to /usr/lib/fp4lab/, which the installed executable's RUNPATH names. The wheel's
# libraries find each other there through the $ORIGIN they already have in their own RUNPATH.
# This makes the package large (about 2.6 GB installed), but self-contained.
# System libraries (Qt, HDF5, yaml-cpp, tcmalloc, ...) stay out: dpkg-shlibdeps turns them into
# Depends, and finds the bundled ones inside the package through $ORIGIN.
set(_fp4lab_private_libdir lib/fp4lab)
set_target_properties(fp4lab PROPERTIES INSTALL_RPATH "$ORIGIN/../${_fp4lab_private_libdir}")
install(CODE "set(_fp4lab_exe \"$<TARGET_FILE:fp4lab>\")
set(_fp4lab_libdir \"\${CMAKE_INSTALL_PREFIX}/${_fp4lab_private_libdir}\")")
install(CODE [[
  file(GET_RUNTIME_DEPENDENCIES
    EXECUTABLES "${_fp4lab_exe}"
    RESOLVED_DEPENDENCIES_VAR _fp4lab_deps
    UNRESOLVED_DEPENDENCIES_VAR _fp4lab_missing
    POST_EXCLUDE_REGEXES "^/(usr/)?lib(32|64|x32)?/")
  if(_fp4lab_missing)
    message(FATAL_ERROR "fp4lab's libraries not found: ${_fp4lab_missing}")
  endif()
  file(INSTALL ${_fp4lab_deps} DESTINATION "${_fp4lab_libdir}" FOLLOW_SYMLINK_CHAIN
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
]])

# The desktop entry launches `fp4lab gui`, which headless builds (-DFP4LAB_GUI=OFF) do not have.
if(FP4LAB_GUI)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/${FP4LAB_APP_ID}.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/${FP4LAB_APP_ID}.metainfo.xml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
  # Icons are named after the app id, as the desktop entry's Icon= says.
  install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/fp4lab.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps
          RENAME ${FP4LAB_APP_ID}.svg)
  install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/fp4lab.png
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/256x256/apps
          RENAME ${FP4LAB_APP_ID}.png)
endif()
# The shipped models, where builtinModelPath() looks (engine/run/model_source.cpp).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/resources/models
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fp4lab)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fp4lab)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "fp4lab")
set(CPACK_PACKAGE_CONTACT "fp4lab maintainers <maintainers@users.noreply.a-seed-b170dac1.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION} for language models (NVFP4, MXFP4)")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "fp4lab takes language models to 4-bit floating point (NVFP4, and MXFP4 as gpt-oss\n"
  "ships): SFT, PTQ, QAT and QAD on a LibTorch engine, FP4 kernels bit-exact with what\n"
  "inference engines load, an HDF5 log of every run, and a Qt 6 workbench that plots it.\n"
  "It carries its own copy of LibTorch ${Torch_VERSION} (the torch wheel's libraries) in\n"
  "/usr/lib/fp4lab.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${_fp4lab_pkg_prefix})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
find_program(FP4LAB_DPKG dpkg)
if(FP4LAB_DPKG)
  execute_process(COMMAND ${FP4LAB_DPKG} --print-architecture
                  OUTPUT_VARIABLE CPACK_DEBIAN_PACKAGE_ARCHITECTURE
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Loaded at run time, not linked: Qt's SVG image and icon-engine plugins, for the window icon.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libqt6svg6")
# zstd on every core: gzip takes minutes over 2.6 GB. dpkg reads zstd since Debian 12.
set(CPACK_DEBIAN_COMPRESSION_TYPE zstd)
set(CPACK_THREADS 0)
include(CPack)
