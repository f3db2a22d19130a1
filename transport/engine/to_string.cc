#include "transport/engine/types.h"

namespace ibemu::engine {

const char* to_string(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocLenErr:
      return "local length error";
    case WcStatus::kLocQpOpErr:
      return "local QP operation error";
    case WcStatus::kLocProtErr:
      return "local protection error";
    case WcStatus::kWrFlushErr:
      return "WR flushed";
    case WcStatus::kMwBindErr:
      return "memory window bind error";
    case WcStatus::kBadRespErr:
      return "bad response";
    case WcStatus::kLocAccessErr:
      return "local access error";
    case WcStatus::kRemInvReqErr:
      return "remote invalid request";
    case WcStatus::kRemAccessErr:
      return "remote access error";
    case WcStatus::kRemOpErr:
      return "remote operational error";
    case WcStatus::kRetryExcErr:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr:
      return "RNR retry counter exceeded";
    case WcStatus::kFatalErr:
      return "fatal error";
    case WcStatus::kGeneralErr:
      return "general error";
  }
  return "unknown";
}

const char* to_string(QpState s) {
  static const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
  return names[static_cast<int>(s) & 7];
}

}  // namespace ibemu::engine
