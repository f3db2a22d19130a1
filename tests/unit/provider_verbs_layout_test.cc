// Which ops layout the provider expects of each libibverbs release
// (provider/verbs_layout.h): the PABI and the verbs a release exports.
#include "provider/verbs_layout.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <set>
#include <string>

namespace {

bool exports(const char* name, void* arg) {
  return static_cast<std::set<std::string>*>(arg)->count(name) != 0;
}

int layout_of(int pabi, std::set<std::string> verbs) {
  return ibemu_verbs_ops_layout(pabi, exports, &verbs);
}

TEST(VerbsLayout, Pabi34SplitsAtV36) {
  EXPECT_EQ(layout_of(34, {"ibv_reg_mr"}), 35);
  EXPECT_EQ(layout_of(34, {"ibv_reg_mr", "ibv_query_qp_data_in_order"}), 36);
}

TEST(VerbsLayout, Pabi59SplitsAtV62) {
  EXPECT_EQ(layout_of(59, {"ibv_reg_mr_ex", "ibv_query_qp_data_in_order"}), 59);
  EXPECT_EQ(layout_of(59, {"ibv_reg_mr_ex", "ibv_query_port_speed"}), 62);
}

TEST(VerbsLayout, OtherPabisHaveOneLayout) {
  EXPECT_EQ(layout_of(57, {}), 57);
  EXPECT_EQ(layout_of(64, {"ibv_query_port_speed", "ibv_alloc_buf"}), 64);
  EXPECT_EQ(layout_of(65, {"ibv_create_comp_cntr"}), 65);
}

TEST(VerbsLayout, UnknownPabiHasNone) {
  EXPECT_EQ(layout_of(33, {}), 0);
  EXPECT_EQ(layout_of(66, {"ibv_create_comp_cntr"}), 0);
}

// The libibverbs this test links against is the one the build was made for.
TEST(VerbsLayout, RunningLibraryIsTheBuildsOwn) {
  ASSERT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");  // libibverbs is loaded
  EXPECT_EQ(ibemu_running_verbs_ops_layout(IBEMU_VERBS_PABI), IBEMU_VERBS_OPS_LAYOUT);
}

}  // namespace
