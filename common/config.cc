#include "common/config.h"

#include "common/json_integer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "common/state_page.h"

namespace ibemu {

int mtu_enum_from_bytes(int bytes) {
  switch (bytes) {
    case 256:
      return 1;
    case 512:
      return 2;
    case 1024:
      return 3;
    case 2048:
      return 4;
    case 4096:
      return 5;
    default:
      return 0;
  }
}

namespace {

uint64_t parse_guid(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  std::string s = v.get<std::string>();
  std::string hex;
  for (char c : s)
    if (c != ':') hex += c;
  if (hex.rfind("0x", 0) == 0 || hex.rfind("0X", 0) == 0) hex.erase(0, 2);
  uint64_t g = 0;
  const char* end = hex.data() + hex.size();
  const auto [ptr, ec] = std::from_chars(hex.data(), end, g, 16);
  if (hex.empty() || ec != std::errc() || ptr != end)
    throw std::runtime_error("bad GUID (up to 16 hex digits, colons allowed): " + s);
  return g;
}

template <typename T>
void read_opt(const nlohmann::json& obj, const char* key, T* out) {
  if (!obj.contains(key)) return;
  const nlohmann::json& v = obj.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // get<int>() of 1e78 or of -1 into an unsigned field is not an error to
    // nlohmann::json but a wrong (or undefined) value: check first.
    if (!json_fits<T>(v))
      throw std::runtime_error(std::string(key) + " must be an integer from " +
                               std::to_string(std::numeric_limits<T>::min()) + " to " +
                               std::to_string(std::numeric_limits<T>::max()));
  }
  *out = v.get<T>();
}

/// A misspelt key would silently keep its default: refuse it.
void reject_unknown_keys(const nlohmann::json& obj, std::initializer_list<const char*> known,
                         const char* what) {
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
      throw std::runtime_error(std::string("unknown ") + what + " key: " + key);
  }
}

/// The shared secret of the hosts' datagrams: the bytes of a regular file
/// (at most 4 KiB) without a final newline, at least 16 of them.
std::string read_secret(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("fabric.secret_file: " + path +
                             " must be a readable regular file of at most 4 KiB");
  }
  std::string secret(size_t(st.st_size), '\0');
  const ssize_t n = read(fd, secret.data(), secret.size());
  close(fd);
  secret.resize(n > 0 ? size_t(n) : 0);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < 16)
    throw std::runtime_error("fabric.secret_file: " + path + " holds fewer than 16 bytes");
  return secret;
}

FabricConfig parse_fabric(const nlohmann::json& f) {
  if (!f.is_object()) throw std::runtime_error("fabric must be a JSON object");
  reject_unknown_keys(f,
                      {"bind", "port", "peers", "seed", "max_hosts", "hello_ms", "dead_ms",
                       "datagram_bytes", "secret_file"},
                      "fabric config");
  FabricConfig c;
  c.enabled = true;
  read_opt(f, "bind", &c.bind);
  read_opt(f, "port", &c.port);
  read_opt(f, "peers", &c.peers);
  read_opt(f, "seed", &c.seed);
  read_opt(f, "max_hosts", &c.max_hosts);
  read_opt(f, "hello_ms", &c.hello_ms);
  read_opt(f, "dead_ms", &c.dead_ms);
  read_opt(f, "datagram_bytes", &c.datagram_bytes);
  if (c.max_hosts < 2 || c.max_hosts > 128)
    throw std::runtime_error("fabric.max_hosts must be 2..128");
  if (int(c.peers.size()) > c.max_hosts - 1)
    throw std::runtime_error("fabric.peers lists more hosts than fabric.max_hosts allows");
  if (c.hello_ms < 1 || c.dead_ms <= c.hello_ms)
    throw std::runtime_error("fabric.dead_ms must be longer than fabric.hello_ms (>= 1)");
  if (c.datagram_bytes < 4200 || c.datagram_bytes > 65000)
    throw std::runtime_error("fabric.datagram_bytes must be 4200..65000");
  if (c.port == 0) throw std::runtime_error("fabric.port must not be 0");
  if (f.contains("secret_file")) c.secret = read_secret(f.at("secret_file").get<std::string>());
  return c;
}

std::vector<FaultConfig> parse_faults(const nlohmann::json& list) {
  if (!list.is_array()) throw std::runtime_error("faults must be an array");
  std::vector<FaultConfig> out;
  for (const auto& f : list) {
    if (!f.is_object()) throw std::runtime_error("each fault must be a JSON object");
    reject_unknown_keys(f,
                        {"interface", "drop", "duplicate", "reorder", "delay_us", "jitter_us",
                         "rate_mbps", "seed", "link"},
                        "fault config");
    FaultConfig c;
    const std::string where = f.value("interface", std::string());
    const auto colon = where.find(':');
    c.device = where.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string digits = where.substr(colon + 1);
      const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), c.port);
      if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() ||
          c.port < 1 || c.port > 4)
        throw std::runtime_error("a fault's interface is DEVICE[:PORT] with PORT 1..4: " + where);
    }
    if (c.device.empty()) throw std::runtime_error("a fault needs \"interface\": DEVICE[:PORT]");
    read_opt(f, "drop", &c.drop);
    read_opt(f, "duplicate", &c.duplicate);
    read_opt(f, "reorder", &c.reorder);
    read_opt(f, "delay_us", &c.delay_us);
    read_opt(f, "jitter_us", &c.jitter_us);
    read_opt(f, "rate_mbps", &c.rate_mbps);
    read_opt(f, "seed", &c.seed);
    const std::string link = f.value("link", std::string("up"));
    if (link != "up" && link != "down") throw std::runtime_error("a fault's link is up or down");
    c.link_down = link == "down";
    if (c.link_down && c.port == 0) throw std::runtime_error("link down needs DEVICE:PORT");
    for (double pct : {c.drop, c.duplicate, c.reorder})
      if (pct < 0 || pct > 100) throw std::runtime_error("fault percentages are 0..100");
    out.push_back(c);
  }
  return out;
}

/// "a.b.c.d[/len]" (or an IPv6 address) normalized to "address/len", with
/// `default_len` when none is given; throws on anything else.
std::string normalize_address(const std::string& text, int family, int default_len,
                              const std::string& where) {
  const size_t slash = text.find('/');
  const std::string host = text.substr(0, slash);
  unsigned char buf[16];
  const int max_len = family == AF_INET ? 32 : 128;
  int len = default_len;
  bool ok = inet_pton(family, host.c_str(), buf) == 1;
  if (ok && slash != std::string::npos) {
    const std::string digits = text.substr(slash + 1);
    ok = !digits.empty() && digits.size() <= 3 &&
         digits.find_first_not_of("0123456789") == std::string::npos;
    if (ok) len = std::stoi(digits);
    ok = ok && len >= 1 && len <= max_len;
  }
  if (!ok)
    throw std::runtime_error(where + ": '" + text + "' is not an " +
                             (family == AF_INET ? "IPv4" : "IPv6") + " address[/prefix length]");
  char out[INET6_ADDRSTRLEN];
  inet_ntop(family, buf, out, sizeof out);
  return std::string(out) + "/" + std::to_string(len);
}

/// Each device has one address per port (or none of a family), and no two
/// ports share one.
void check_port_addresses(Config& cfg) {
  std::set<std::string> seen;
  for (auto& d : cfg.devices) {
    for (auto [list, family, default_len] :
         {std::tuple{&d.ipv4, AF_INET, 16}, std::tuple{&d.ipv6, AF_INET6, 64}}) {
      const char* key = family == AF_INET ? "ipv4" : "ipv6";
      if (!list->empty() && int(list->size()) != d.ports)
        throw std::runtime_error("device " + d.name + ": " + key + " needs one address per port (" +
                                 std::to_string(d.ports) + ")");
      for (auto& a : *list) {
        a = normalize_address(a, family, default_len, "device " + d.name + " " + key);
        if (!seen.insert(a.substr(0, a.find('/'))).second)
          throw std::runtime_error("address " + a + " is given to two ports");
      }
    }
  }
}

}  // namespace

namespace {
// Every node and port GUID names one thing on the subnet: an SM that meets
// one twice takes the second for the first and leaves it unconfigured, so
// two devices sharing a GUID would never both come up.
void check_unique_guids(const Config& cfg) {
  std::map<uint64_t, std::string> seen;
  auto claim = [&seen](uint64_t guid, const std::string& what) {
    auto [it, fresh] = seen.emplace(guid, what);
    if (!fresh)
      throw std::runtime_error(what + " has GUID " + fmt::format("0x{:016x}", guid) + ", which " +
                               it->second + " already has");
  };
  claim((0x02ull << 56) | (uint64_t(cfg.host_id) << 24) | 0xff00, "the emulated switch");
  for (const auto& d : cfg.devices) {
    claim(d.node_guid, d.name);
    for (int p = 1; p <= d.ports; ++p)
      claim(d.node_guid + uint64_t(p), d.name + " port " + std::to_string(p));
  }
}
}  // namespace

Config Config::parse(const std::string& json_text) {
  Config cfg;
  nlohmann::json j;
  try {
    j = json_text.empty() ? nlohmann::json::object() : nlohmann::json::parse(json_text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("config is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::runtime_error("config must be a JSON object");
  reject_unknown_keys(j,
                      {"devices", "max_mtu", "default_pkey", "pkeys", "subnet_prefix", "host_id",
                       "log_level", "fabric", "faults", "kernel", "users", "limits"},
                      "config");
  try {
    read_opt(j, "max_mtu", &cfg.max_mtu);
    read_opt(j, "default_pkey", &cfg.default_pkey);
    if (j.contains("pkeys")) {
      if (!j["pkeys"].is_array()) throw std::runtime_error("pkeys must be an array");
      for (const auto& k : j["pkeys"]) {
        if (!k.is_number_unsigned() || k.get<uint64_t>() > 0xffff)
          throw std::runtime_error("pkeys: each entry is a 16-bit P_Key");
        cfg.pkeys.push_back(k.get<uint16_t>());
      }
    }
    read_opt(j, "host_id", &cfg.host_id);
    read_opt(j, "log_level", &cfg.log_level);
    read_opt(j, "kernel", &cfg.kernel);
    if (cfg.kernel != "auto" && cfg.kernel != "on" && cfg.kernel != "off")
      throw std::runtime_error("kernel must be \"auto\", \"on\" or \"off\"");
    read_opt(j, "users", &cfg.users);
    if (j.contains("limits")) {
      const nlohmann::json& l = j["limits"];
      if (!l.is_object()) throw std::runtime_error("limits must be a JSON object");
      reject_unknown_keys(l,
                          {"qps_per_context", "registered_bytes_per_context", "sessions_per_user",
                           "contexts_per_session", "cm_binds_per_session"},
                          "limits");
      read_opt(l, "qps_per_context", &cfg.qps_per_context);
      read_opt(l, "registered_bytes_per_context", &cfg.registered_bytes_per_context);
      read_opt(l, "sessions_per_user", &cfg.sessions_per_user);
      read_opt(l, "contexts_per_session", &cfg.contexts_per_session);
      read_opt(l, "cm_binds_per_session", &cfg.cm_binds_per_session);
      for (const char* key :
           {"qps_per_context", "sessions_per_user", "contexts_per_session", "cm_binds_per_session"})
        if (l.contains(key) && l[key] == 0)
          throw std::runtime_error(std::string("limits.") + key + " must be >= 1");
    }
    if (cfg.users != "isolated" && cfg.users != "shared")
      throw std::runtime_error("users must be \"isolated\" or \"shared\"");
    if (j.contains("subnet_prefix")) cfg.subnet_prefix = parse_guid(j["subnet_prefix"]);
    if (j.contains("fabric")) cfg.fabric = parse_fabric(j["fabric"]);
    if (j.contains("faults")) cfg.faults = parse_faults(j["faults"]);
    if (j.contains("devices")) {
      if (!j["devices"].is_array()) throw std::runtime_error("devices must be an array");
      if (j["devices"].size() > size_t(kMaxDevices))
        throw std::runtime_error("at most " + std::to_string(kMaxDevices) + " devices");
      for (auto& d : j["devices"]) {
        if (!d.is_object()) throw std::runtime_error("each device must be a JSON object");
        reject_unknown_keys(
            d,
            {"name", "ports", "vendor_id", "vendor_part_id", "hw_ver", "fw_ver", "board_id",
             "node_desc", "node_guid", "sys_image_guid", "ipv4", "ipv6"},
            "device config");
        DeviceConfig dev;
        read_opt(d, "name", &dev.name);
        read_opt(d, "ports", &dev.ports);
        read_opt(d, "vendor_id", &dev.vendor_id);
        read_opt(d, "vendor_part_id", &dev.vendor_part_id);
        read_opt(d, "hw_ver", &dev.hw_ver);
        read_opt(d, "fw_ver", &dev.fw_ver);
        read_opt(d, "board_id", &dev.board_id);
        read_opt(d, "node_desc", &dev.node_desc);
        if (d.contains("node_guid")) dev.node_guid = parse_guid(d["node_guid"]);
        if (d.contains("sys_image_guid")) dev.sys_image_guid = parse_guid(d["sys_image_guid"]);
        read_opt(d, "ipv4", &dev.ipv4);
        read_opt(d, "ipv6", &dev.ipv6);
        cfg.devices.push_back(dev);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("config has a field of the wrong type: ") + e.what());
  }
  if (!mtu_enum_from_bytes(cfg.max_mtu))
    throw std::runtime_error("max_mtu must be 256, 512, 1024, 2048 or 4096");
  // IBA 10.9.1: the low 15 bits name the partition; 0 is no partition.
  if (cfg.pkeys.size() > kMaxPkeys)
    throw std::runtime_error("pkeys: at most " + std::to_string(kMaxPkeys) + " entries");
  for (uint16_t k : cfg.pkeys)
    if ((k & 0x7fff) == 0) throw std::runtime_error("pkeys: 0x0000 and 0x8000 are not P_Keys");
  if ((cfg.default_pkey & 0x7fff) == 0)
    throw std::runtime_error("default_pkey: 0x0000 and 0x8000 are not P_Keys");
  for (auto& d : cfg.devices)
    if (d.ports < 1 || d.ports > 4) throw std::runtime_error("ports must be 1..4");
  static const char* levels[] = {"debug", "info", "warn", "error"};
  if (std::find(std::begin(levels), std::end(levels), cfg.log_level) == std::end(levels))
    throw std::runtime_error("log_level must be debug, info, warn or error");
  cfg.finalize();
  check_port_addresses(cfg);
  std::set<std::string> names;
  for (auto& d : cfg.devices) {
    // The provider claims devices by this prefix; sysfs and the state page
    // hold at most 31 characters.
    if (d.name.rfind("ibemu", 0) != 0 || d.name.size() > 31 ||
        d.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      throw std::runtime_error("device name '" + d.name +
                               "' must start with 'ibemu' and use at most 31 of a-z 0-9 _");
    if (!names.insert(d.name).second) throw std::runtime_error("duplicate device name " + d.name);
  }
  check_unique_guids(cfg);
  return cfg;
}

Config Config::load(const std::string& path) {
  if (path.empty()) return parse("");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read config file " + path);
  // Read one byte past the limit to tell a file that fits from one that
  // does not, without reading (or parsing) all of a huge one.
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw std::runtime_error("cannot read config file " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw std::runtime_error("config file " + path + " is larger than " +
                             std::to_string(kMaxConfigBytes / 1024) + " KiB");
  return parse(text);
}

void Config::finalize() {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  if (devices.empty()) {
    devices.resize(2);
    devices[0].name = "ibemu0";
    devices[1].name = "ibemu1";
  }
  if (host_id == 0) {
    // Hosts emulated in network namespaces of one machine share the hostname;
    // the namespace's inode tells them apart (and is fixed for the initial one).
    struct stat ns {};
    std::string id = host;
    if (stat("/proc/self/ns/net", &ns) == 0) id += "/" + std::to_string(ns.st_ino);
    host_id = static_cast<uint32_t>(std::hash<std::string>{}(id)) & 0xffffff;
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    auto& d = devices[i];
    if (d.name.empty()) d.name = "ibemu" + std::to_string(i);
    // OUI-style prefix 0x02 (locally administered) + host id + device index.
    if (!d.node_guid)
      d.node_guid = (0x02ull << 56) | (uint64_t(host_id) << 24) | (uint64_t(i + 1) << 8);
    if (!d.sys_image_guid) d.sys_image_guid = d.node_guid;
    if (d.node_desc.empty()) d.node_desc = std::string(host) + " " + d.name;
  }
  // Default port addresses: 10.73.H.n/16 for the host's n-th port, H the
  // last octet of the fabric address so that hosts of one fabric differ.
  int host_octet = 0;
  in_addr bind_addr{};
  if (fabric.enabled && inet_pton(AF_INET, fabric.bind.c_str(), &bind_addr) == 1)
    host_octet = int(ntohl(bind_addr.s_addr) & 0xff);
  int ordinal = 0;
  for (auto& d : devices) {
    const bool given = !d.ipv4.empty();
    for (int p = 0; p < d.ports; ++p) {
      ++ordinal;
      if (!given)
        d.ipv4.push_back("10.73." + std::to_string(host_octet) + "." + std::to_string(ordinal) +
                         "/16");
    }
  }
}

}  // namespace ibemu
