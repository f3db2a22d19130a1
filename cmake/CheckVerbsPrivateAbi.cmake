# The provider is built against the private provider ABI of libibverbs
# (IBVERBS_PRIVATE_34, rdma-core v35..v56). rdma-core does not install driver.h,
# so provider/verbs_driver.h declares what ibemu needs; make sure the system
# library really exports that ABI, or stop here with a message that says why.
set(IBEMU_VERBS_PABI 34)
find_library(IBEMU_LIBIBVERBS NAMES ibverbs REQUIRED)
execute_process(COMMAND nm -D ${IBEMU_LIBIBVERBS}
                OUTPUT_VARIABLE _ibemu_verbs_syms RESULT_VARIABLE _ibemu_nm_rc)
if(NOT _ibemu_nm_rc EQUAL 0)
  message(FATAL_ERROR "ibemu: cannot read the symbols of ${IBEMU_LIBIBVERBS} (is binutils installed?)")
endif()
string(FIND "${_ibemu_verbs_syms}" "verbs_register_driver_${IBEMU_VERBS_PABI}" _ibemu_has_pabi)
if(_ibemu_has_pabi EQUAL -1)
  message(FATAL_ERROR
    "ibemu: ${IBEMU_LIBIBVERBS} does not export IBVERBS_PRIVATE_${IBEMU_VERBS_PABI} "
    "(verbs_register_driver_${IBEMU_VERBS_PABI}). ibemu's provider supports rdma-core "
    "v35 to v56; install libibverbs-dev from such a release.")
endif()
message(STATUS "ibemu: libibverbs exports IBVERBS_PRIVATE_${IBEMU_VERBS_PABI}")
