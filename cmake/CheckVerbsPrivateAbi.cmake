# The provider plugs into libibverbs' private provider ABI, IBVERBS_PRIVATE_<N>,
# whose number N (the PABI) rdma-core raises whenever the layout a provider
# sees changes. rdma-core does not install driver.h, so
# provider/verbs_driver.h declares what ibemu needs for every PABI it knows;
# here the build finds the PABI of the libibverbs it links against (the
# verbs_register_driver_<N> that library exports) and compiles for it.
#
#   PABI  rdma-core
#   34    v35 .. v56
#   57    v57 .. v58
#   59    v59 .. v63
#   64    v64
#   65    v65 ..
#
# Twice rdma-core added provider ops without a new PABI (v36 and v62), so the
# layout of struct verbs_context_ops is told apart by the public verbs those
# releases brought (provider/verbs_driver.h, provider/verbs_layout.c):
# IBEMU_VERBS_OPS_LAYOUT is the first release with the found layout.
#
# The results: IBEMU_VERBS_PABI and IBEMU_VERBS_OPS_LAYOUT (compile
# definitions everywhere), IBEMU_LIBIBVERBS_RANGE (the libibverbs releases
# the provider fits, for the package's dependency) and the provider's file
# name libibemu-rdmav<PABI>.so, which libibverbs derives from its own PABI
# when it loads a driver.
set(IBEMU_KNOWN_VERBS_PABIS 34 57 59 64 65)
find_library(IBEMU_LIBIBVERBS NAMES ibverbs REQUIRED)
execute_process(COMMAND nm -D --defined-only ${IBEMU_LIBIBVERBS}
                OUTPUT_VARIABLE _ibemu_verbs_syms RESULT_VARIABLE _ibemu_nm_rc)
if(NOT _ibemu_nm_rc EQUAL 0)
  message(FATAL_ERROR "ibemu: cannot read the symbols of ${IBEMU_LIBIBVERBS} (is binutils installed?)")
endif()
string(REGEX MATCH "verbs_register_driver_([0-9]+)" _ibemu_register "${_ibemu_verbs_syms}")
if(NOT _ibemu_register)
  message(FATAL_ERROR
    "ibemu: ${IBEMU_LIBIBVERBS} exports no verbs_register_driver_<N>: it is not "
    "rdma-core's libibverbs, or older than v35, which ibemu does not support.")
endif()
set(IBEMU_VERBS_PABI ${CMAKE_MATCH_1})
if(NOT IBEMU_VERBS_PABI IN_LIST IBEMU_KNOWN_VERBS_PABIS)
  message(FATAL_ERROR
    "ibemu: ${IBEMU_LIBIBVERBS} speaks the provider ABI IBVERBS_PRIVATE_${IBEMU_VERBS_PABI}, "
    "which ibemu does not know (it knows ${IBEMU_KNOWN_VERBS_PABIS}). A provider built for "
    "another layout would corrupt the programs that load it; see docs/install.md, "
    "\"Another rdma-core\".")
endif()
# The first release of each layout, the verb that marks it, and (for the
# package) the first release of the next layout.
set(IBEMU_VERBS_OPS_LAYOUT ${IBEMU_VERBS_PABI})
if(IBEMU_VERBS_PABI EQUAL 34)
  set(IBEMU_VERBS_OPS_LAYOUT 35)
  if(_ibemu_verbs_syms MATCHES " ibv_query_qp_data_in_order@")
    set(IBEMU_VERBS_OPS_LAYOUT 36)
  endif()
elseif(IBEMU_VERBS_PABI EQUAL 59 AND _ibemu_verbs_syms MATCHES " ibv_query_port_speed@")
  set(IBEMU_VERBS_OPS_LAYOUT 62)
endif()
set(_ibemu_next_layout_35 36)
set(_ibemu_next_layout_36 57)
set(_ibemu_next_layout_57 59)
set(_ibemu_next_layout_59 62)
set(_ibemu_next_layout_62 64)
set(_ibemu_next_layout_64 65)
set(IBEMU_LIBIBVERBS_RANGE "libibverbs1 (>= ${IBEMU_VERBS_OPS_LAYOUT})")
if(DEFINED _ibemu_next_layout_${IBEMU_VERBS_OPS_LAYOUT})
  string(APPEND IBEMU_LIBIBVERBS_RANGE
         ", libibverbs1 (<< ${_ibemu_next_layout_${IBEMU_VERBS_OPS_LAYOUT}})")
endif()
set(IBEMU_PROVIDER_FILE libibemu-rdmav${IBEMU_VERBS_PABI}.so)
add_compile_definitions(IBEMU_VERBS_PABI=${IBEMU_VERBS_PABI}
                        IBEMU_VERBS_OPS_LAYOUT=${IBEMU_VERBS_OPS_LAYOUT}
                        IBEMU_PROVIDER_FILE_NAME="${IBEMU_PROVIDER_FILE}")
message(STATUS "ibemu: libibverbs exports IBVERBS_PRIVATE_${IBEMU_VERBS_PABI} with the "
               "provider ops of rdma-core v${IBEMU_VERBS_OPS_LAYOUT}; the provider is "
               "${IBEMU_PROVIDER_FILE}")
