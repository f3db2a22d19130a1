# `make package`: Debian packages of the install components (packaging/CMakeLists.txt),
# built by CPack into the build directory:
#   ibemu_VERSION_ARCH.deb       the user space: programs, provider, shim,
#                                systemd units, man pages, docs
#   ibemu-dkms_VERSION_all.deb   ibemu.ko's sources, built by DKMS on the target
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ibemu)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(IBEMU_PACKAGE_CONTACT "ibemu maintainers <maintainers@users.noreply.a-seed-7434dd17.example>"
    CACHE STRING "Maintainer field of the Debian packages")
set(CPACK_PACKAGE_CONTACT "${IBEMU_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dkms)
# /etc and libibverbs' provider directory are absolute destinations: the
# packages are staged with DESTDIR, as `make install DESTDIR=...` is.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ibemu)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION net)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "emulated InfiniBand HCAs for unmodified verbs programs
ibemu emulates InfiniBand host channel adapters in software: rdma-core
programs (ibv_devinfo, ibv_rc_pingpong, perftest, programs linked against
libibverbs) run on emulated HCAs on a machine with no RDMA hardware.

This package holds the daemon ibemud, the command ibemu, the subnet
manager ibemu-sm, the libibverbs provider and the preload shim of
no-kernel mode, systemd units and the documentation. The kernel module of
kernel mode is in ibemu-dkms.")
# dpkg-shlibdeps finds libibverbs1 and libc6; the provider fits only the
# libibverbs releases of the private ABI and ops layout it was built for
# (cmake/CheckVerbsPrivateAbi.cmake).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "${IBEMU_LIBIBVERBS_RANGE}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "ibverbs-utils")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "ibemu-dkms, infiniband-diags, perftest, rdma-core")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/ibemu/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/ibemu/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/ibemu/postrm
    ${PROJECT_SOURCE_DIR}/packaging/debian/ibemu/conffiles)

set(CPACK_DEBIAN_DKMS_PACKAGE_NAME ibemu-dkms)
set(CPACK_DEBIAN_DKMS_PACKAGE_SECTION kernel)
set(CPACK_DEBIAN_DKMS_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_DKMS_PACKAGE_DEPENDS "dkms")
set(CPACK_DEBIAN_DKMS_PACKAGE_RECOMMENDS "linux-headers-amd64 | linux-headers-generic")
set(CPACK_COMPONENT_DKMS_DESCRIPTION "ibemu kernel module (DKMS sources)
ibemu.ko registers ibemu's emulated HCAs with the kernel's RDMA core, so
that every verbs program on the host uses them with no environment
(kernel mode). DKMS builds it for each installed kernel whose headers are
present.")
foreach(script postinst prerm)
  configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/ibemu-dkms/${script}.in
                 ${CMAKE_BINARY_DIR}/packaging/ibemu-dkms/${script} @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                 WORLD_READ WORLD_EXECUTE)
  list(APPEND CPACK_DEBIAN_DKMS_PACKAGE_CONTROL_EXTRA
       ${CMAKE_BINARY_DIR}/packaging/ibemu-dkms/${script})
endforeach()

include(CPack)
