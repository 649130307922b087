# What `cmake --install build [--prefix P]` puts under P (default /usr/local):
#   bin/kiln                              the command line
#   lib/libkiln_*.a                       the static libraries the headers need
#   include/kiln/{framework,passes,...}/  the headers, #include "framework/..." with include/kiln on the path
#   lib/cmake/kiln/                       kilnConfig.cmake: find_package(kiln) gives kiln::kiln_tools etc.
#   share/kiln/digits.csv.gz              the bundled digits data (kiln train --dataset digits)
#   lib/python3.N/dist-packages/kiln/     the Python package (KILN_PYTHON), Debian's site dir for /usr/local
include(CMakePackageConfigHelpers)

set(KILN_LIBRARIES kiln_proto kiln_framework kiln_passes kiln_runtime kiln_compiler kiln_launch_op kiln_onnx
    kiln_tools)
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${KILN_LIBRARIES} EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir framework passes runtime compiler launch_op tools)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${KILN_INSTALL_INCLUDEDIR}/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/framework/proto/framework.pb.h
        DESTINATION ${KILN_INSTALL_INCLUDEDIR}/framework/proto)
install(FILES ${PROJECT_SOURCE_DIR}/tools/data/digits.csv.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

if(KILN_PYTHON)
  # Debian's /usr/bin/python3 has PREFIX/lib/python3.N/dist-packages on its
  # path for PREFIX=/usr/local (sysconfig's own answer there is
  # /usr/local/local/..., Debian's posix_local scheme). Relative, so that
  # --prefix moves it too.
  # lib, not lib/x86_64-linux-gnu: Debian's site dirs do not carry the multiarch part.
  set(KILN_PYTHON_INSTALL_DIR "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages"
      CACHE STRING "Where the kiln Python package goes, relative to the install prefix")
  install(TARGETS kiln_python LIBRARY DESTINATION ${KILN_PYTHON_INSTALL_DIR}/kiln)
  install(FILES ${KILN_PY_OUT} DESTINATION ${KILN_PYTHON_INSTALL_DIR}/kiln)
endif()
