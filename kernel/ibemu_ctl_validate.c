// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The checks every message written to /dev/ibemu passes before the module
 * acts on it. Plain C with no kernel dependency, so that the same code is
 * fuzzed in user space.
 */
#include "ibemu_ctl_validate.h"

static int terminated(const char *s, unsigned int size)
{
	unsigned int i;

	for (i = 0; i < size; i++)
		if (!s[i])
			return i > 0;
	return 0;
}

/* Past QP0 and QP1, short of the multicast QPN; or none at all. */
static int qpn_block_ok(__u32 first, __u32 count)
{
	if (!count)
		return !first;
	return first >= 2 && first < IBEMU_CTL_MULTICAST_QPN &&
	       count <= IBEMU_CTL_MULTICAST_QPN - first;
}

static int check_add_device(const struct ibemu_ctl_add_device *m)
{
	if (m->abi_version != IBEMU_CTL_ABI_VERSION)
		return -EINVAL;
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->num_ports < 1 ||
	    m->num_ports > IBEMU_CTL_MAX_PORTS)
		return -EINVAL;
	if (!terminated(m->name, sizeof(m->name)) ||
	    !terminated(m->node_desc, sizeof(m->node_desc)))
		return -EINVAL;
	/* ib_core expands a '%' in a device name into a number. */
	for (const char *c = m->name; *c; c++)
		if (*c == '%' || *c == '/' || *c <= ' ' || *c > '~')
			return -EINVAL;
	if (!m->max_cqe || !m->max_sge)
		return -EINVAL;
	if (!qpn_block_ok(m->kernel_qpn_first, m->kernel_qpn_count))
		return -EINVAL;
	if (m->max_fast_reg_pages > IBEMU_CTL_MAX_FAST_REG_PAGES ||
	    m->reserved2)
		return -EINVAL;
	return 0;
}

static int check_set_port(const struct ibemu_ctl_set_port *m)
{
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->port < 1 ||
	    m->port > IBEMU_CTL_MAX_PORTS)
		return -EINVAL;
	if (m->state < IBEMU_PORT_DOWN || m->state > IBEMU_PORT_ACTIVE_DEFER)
		return -EINVAL;
	if (m->phys_state < 1 || m->phys_state > 7)
		return -EINVAL;
	if (m->max_mtu < 1 || m->max_mtu > 5 || m->active_mtu < 1 ||
	    m->active_mtu > m->max_mtu)
		return -EINVAL;
	if (m->lmc > 7 || m->sm_sl > 15)
		return -EINVAL;
	return 0;
}

static int check_mad_in(const struct ibemu_ctl_mad_in *m)
{
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->port < 1 ||
	    m->port > IBEMU_CTL_MAX_PORTS || m->qpn > 1)
		return -EINVAL;
	if (m->sl > 15 || m->has_grh > 1 || m->src_qp > 0xffffff)
		return -EINVAL;
	return 0;
}

static int check_reply(const struct ibemu_ctl_process_mad_reply *m)
{
	if (m->hdr.seq == 0 || m->result > IBEMU_CTL_MAD_REPLY)
		return -EINVAL;
	return 0;
}

int ibemu_ctl_validate(const void *msg, unsigned long len)
{
	const struct ibemu_ctl_hdr *hdr = msg;

	if (len < sizeof(*hdr) || hdr->length != len)
		return -EINVAL;
	switch (hdr->type) {
	case IBEMU_CTL_ADD_DEVICE:
		return len == sizeof(struct ibemu_ctl_add_device) ?
			       check_add_device(msg) :
			       -EINVAL;
	case IBEMU_CTL_SET_PORT:
		return len == sizeof(struct ibemu_ctl_set_port) ?
			       check_set_port(msg) :
			       -EINVAL;
	case IBEMU_CTL_MAD_IN:
		return len == sizeof(struct ibemu_ctl_mad_in) ?
			       check_mad_in(msg) :
			       -EINVAL;
	case IBEMU_CTL_PROCESS_MAD_REPLY:
		return len == sizeof(struct ibemu_ctl_process_mad_reply) ?
			       check_reply(msg) :
			       -EINVAL;
	default:
		return -EINVAL;
	}
}
