#include "transport/wire/aeth.h"

namespace ibemu::wire {

const char* to_string(AckType t) noexcept {
  switch (t) {
    case AckType::kAck:
      return "ACK";
    case AckType::kRnrNak:
      return "RNR_NAK";
    case AckType::kNak:
      return "NAK";
    case AckType::kReserved:
      return "RESERVED";
  }
  return "UNKNOWN";
}

const char* to_string(NakCode c) noexcept {
  switch (c) {
    case NakCode::kPsnSequenceError:
      return "PSN_SEQUENCE_ERROR";
    case NakCode::kInvalidRequest:
      return "INVALID_REQUEST";
    case NakCode::kRemoteAccessError:
      return "REMOTE_ACCESS_ERROR";
    case NakCode::kRemoteOperationalError:
      return "REMOTE_OPERATIONAL_ERROR";
    case NakCode::kInvalidRdRequest:
      return "INVALID_RD_REQUEST";
  }
  return "RESERVED";
}

}  // namespace ibemu::wire
