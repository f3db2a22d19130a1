-- Wireshark/tshark dissector for ibemu's Dynamically Connected packets
-- (docs/dc.md). Wireshark's InfiniBand dissector decodes their LRH and BTH
-- but not the manufacturer-specific opcodes 0xC0-0xD7; this postdissector
-- names the opcode and decodes the DCETH (and the RETH, AtomicETH, AETH,
-- AtomicAckETH, ImmDt and IETH behind it) from the bytes after the BTH.
--
--   tshark -X lua_script:scripts/wireshark/ibemu-dc.lua -r dc.pcap -V

local dc = Proto("ibemu_dc", "ibemu Dynamically Connected")

local f = {
  opcode = ProtoField.string("ibemu_dc.opcode", "DC opcode"),
  key = ProtoField.uint64("ibemu_dc.dceth.key", "DC access key", base.HEX),
  connect = ProtoField.bool("ibemu_dc.dceth.connect", "Connect"),
  dci = ProtoField.uint24("ibemu_dc.dceth.dci", "DCI QP", base.HEX),
  connection = ProtoField.uint32("ibemu_dc.dceth.connection", "Connection"),
  va = ProtoField.uint64("ibemu_dc.va", "Virtual address", base.HEX),
  rkey = ProtoField.uint32("ibemu_dc.rkey", "Remote key", base.HEX),
  dma_len = ProtoField.uint32("ibemu_dc.dma_len", "DMA length"),
  swap_add = ProtoField.uint64("ibemu_dc.swap_add", "Swap (or add) data", base.HEX),
  compare = ProtoField.uint64("ibemu_dc.compare", "Compare data", base.HEX),
  syndrome = ProtoField.uint8("ibemu_dc.aeth.syndrome", "Syndrome", base.HEX),
  msn = ProtoField.uint24("ibemu_dc.aeth.msn", "MSN"),
  orig = ProtoField.uint64("ibemu_dc.orig", "Original remote data", base.HEX),
  imm = ProtoField.uint32("ibemu_dc.imm", "Immediate data", base.HEX),
  inv_rkey = ProtoField.uint32("ibemu_dc.inv_rkey", "Invalidated rkey", base.HEX),
}
dc.fields = f

local bth_opcode = Field.new("infiniband.bth.opcode")

-- RC's opcodes (IBA 9.2) by their low five bits: name and extension headers.
local kinds = {
  [0x00] = {"SEND_FIRST", {}}, [0x01] = {"SEND_MIDDLE", {}}, [0x02] = {"SEND_LAST", {}},
  [0x03] = {"SEND_LAST_IMM", {"imm"}}, [0x04] = {"SEND_ONLY", {}},
  [0x05] = {"SEND_ONLY_IMM", {"imm"}}, [0x06] = {"RDMA_WRITE_FIRST", {"reth"}},
  [0x07] = {"RDMA_WRITE_MIDDLE", {}}, [0x08] = {"RDMA_WRITE_LAST", {}},
  [0x09] = {"RDMA_WRITE_LAST_IMM", {"imm"}}, [0x0a] = {"RDMA_WRITE_ONLY", {"reth"}},
  [0x0b] = {"RDMA_WRITE_ONLY_IMM", {"reth", "imm"}}, [0x0c] = {"RDMA_READ_REQUEST", {"reth"}},
  [0x0d] = {"RDMA_READ_RESPONSE_FIRST", {"aeth"}}, [0x0e] = {"RDMA_READ_RESPONSE_MIDDLE", {}},
  [0x0f] = {"RDMA_READ_RESPONSE_LAST", {"aeth"}}, [0x10] = {"RDMA_READ_RESPONSE_ONLY", {"aeth"}},
  [0x11] = {"ACKNOWLEDGE", {"aeth"}}, [0x12] = {"ATOMIC_ACKNOWLEDGE", {"aeth", "atomicack"}},
  [0x13] = {"COMPARE_SWAP", {"atomic"}}, [0x14] = {"FETCH_ADD", {"atomic"}},
  [0x16] = {"SEND_LAST_INV", {"ieth"}}, [0x17] = {"SEND_ONLY_INV", {"ieth"}},
}
local is_response = {[0x0d] = true, [0x0e] = true, [0x0f] = true, [0x10] = true,
                     [0x11] = true, [0x12] = true}

-- "RDMA_WRITE_ONLY_IMM" as Wireshark names RC's opcodes: "RDMA Write Only
-- Immediate".
local word_names = {RDMA = "RDMA", IMM = "Immediate", INV = "Invalidate"}
local function display_name(kind_name)
  local words = {}
  for w in kind_name:gmatch("[^_]+") do
    words[#words + 1] = word_names[w] or (w:sub(1, 1) .. w:sub(2):lower())
  end
  return table.concat(words, " ")
end

-- The summary line: Wireshark's own dissector wrote "Unknown OpCode"
-- straight before its "QP=..."; the DC name takes its place.
local function set_info(pinfo, name, dceth)
  local info = tostring(pinfo.cols.info)
  local rest = info:match("Unknown OpCode%s*(.-)%s*$")
  local text = "DC " .. name .. (rest and rest ~= "" and " " .. rest or "")
  if dceth then
    text = text .. string.format(" DCI=0x%06x", dceth.dci) .. (dceth.connect and " Connect" or "")
  end
  if rest then pinfo.cols.info:set(text) else pinfo.cols.info:prepend(text .. " ") end
end

local function add_header(tree, name, r)
  if name == "reth" then
    local t = tree:add(dc, r(0, 16), "RETH")
    t:add(f.va, r(0, 8)); t:add(f.rkey, r(8, 4)); t:add(f.dma_len, r(12, 4))
    return 16
  elseif name == "atomic" then
    local t = tree:add(dc, r(0, 28), "AtomicETH")
    t:add(f.va, r(0, 8)); t:add(f.rkey, r(8, 4))
    t:add(f.swap_add, r(12, 8)); t:add(f.compare, r(20, 8))
    return 28
  elseif name == "aeth" then
    local t = tree:add(dc, r(0, 4), "AETH")
    t:add(f.syndrome, r(0, 1)); t:add(f.msn, r(1, 3))
    return 4
  elseif name == "atomicack" then
    tree:add(f.orig, r(0, 8))
    return 8
  elseif name == "imm" then
    tree:add(f.imm, r(0, 4))
    return 4
  elseif name == "ieth" then
    tree:add(f.inv_rkey, r(0, 4))
    return 4
  end
  return 0
end

function dc.dissector(tvb, pinfo, tree)
  local op = bth_opcode()
  if not op or op.value < 0xc0 or op.value > 0xd7 then return end
  local low = op.value - 0xc0
  local kind = kinds[low]
  if not kind then return end
  local name = "DC_" .. kind[1]
  local t = tree:add(dc, name)
  t:add(f.opcode, name)
  -- The extension headers follow the 12-byte BTH, in the buffer the
  -- InfiniBand dissector read the opcode from.
  local start = op.offset + 12
  local r = op.source:len() > start and op.source(start) or nil
  local dceth = nil
  if r and not is_response[low] and r:len() >= 16 then
    dceth = {connect = bit.band(r(8, 1):uint(), 1) == 1, dci = r(9, 3):uint()}
    local d = t:add(dc, r(0, 16), "DCETH")
    d:add(f.key, r(0, 8))
    d:add(f.connect, r(8, 1), dceth.connect)
    d:add(f.dci, r(9, 3))
    d:add(f.connection, r(12, 4))
  end
  set_info(pinfo, display_name(kind[1]), dceth)
  if not r or (not is_response[low] and not dceth) then return end
  local off = dceth and 16 or 0
  for _, h in ipairs(kind[2]) do
    if r:len() <= off then return end
    off = off + add_header(t, h, r(off))
  end
end

register_postdissector(dc)
