// SPDX-License-Identifier: GPL-2.0
/*
 * The emulated HCAs as ib_core sees them: registration, and port attributes
 * whose changes raise the async events (IBA 11.6.3) that ib_core hands to
 * its clients and to every verbs context's async event file.
 */
#include <linux/platform_device.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "ibemu.h"

DEFINE_MUTEX(ibemu_devices_mutex);
LIST_HEAD(ibemu_devices);

struct ibemu_dev *ibemu_find_device(const char *name)
{
	struct ibemu_dev *dev;

	lockdep_assert_held(&ibemu_devices_mutex);
	list_for_each_entry(dev, &ibemu_devices, node)
		if (!strcmp(dev->info.name, name))
			return dev;
	return NULL;
}

/* A port with no daemon behind it: down, and its link still training. */
static void port_without_daemon(struct ibemu_port_attr *p)
{
	p->state = IB_PORT_DOWN;
	p->phys_state = IB_PORT_PHYS_STATE_POLLING;
	p->lid = 0;
	p->sm_lid = 0;
	p->lmc = 0;
}

struct ibemu_dev *ibemu_create_device(const struct ibemu_ctl_add_device *info)
{
	struct ibemu_dev *dev;
	int i, err;

	lockdep_assert_held(&ibemu_devices_mutex);
	dev = ib_alloc_device(ibemu_dev, ibdev);
	if (!dev)
		return ERR_PTR(-ENOMEM);
	dev->info = *info;
	spin_lock_init(&dev->lock);
	ida_init(&dev->mr_indexes);
	mutex_init(&dev->obj_mutex);
	ida_init(&dev->pd_numbers);
	ida_init(&dev->cq_handles);
	INIT_LIST_HEAD(&dev->kcqs);
	INIT_LIST_HEAD(&dev->kqps);
	INIT_LIST_HEAD(&dev->kmrs);
	INIT_LIST_HEAD(&dev->ksrqs);
	xa_init(&dev->mrs);
	xa_init_flags(&dev->srqs, XA_FLAGS_ALLOC1);
	idr_init(&dev->qpns);
	atomic_set(&dev->dropped_records, 0);
	dev->event_wq = alloc_ordered_workqueue("ibemu-%s", 0, info->name);
	if (!dev->event_wq) {
		ib_dealloc_device(&dev->ibdev);
		return ERR_PTR(-ENOMEM);
	}
	for (i = 0; i < info->num_ports; i++) {
		dev->ports[i].max_mtu = IB_MTU_4096;
		dev->ports[i].active_mtu = IB_MTU_4096;
		dev->ports[i].active_width = IB_WIDTH_4X;
		dev->ports[i].active_speed = IB_SPEED_EDR;
		dev->ports[i].pkeys[0] = 0xffff;
		dev->ports[i].subnet_prefix = info->subnet_prefix;
		dev->ports[i].port_guid = info->port_guids[i];
		port_without_daemon(&dev->ports[i]);
	}

	dev->ibdev.node_type = RDMA_NODE_IB_CA;
	dev->ibdev.phys_port_cnt = info->num_ports;
	dev->ibdev.num_comp_vectors = 1;
	dev->ibdev.node_guid = cpu_to_be64(info->node_guid);
	dev->ibdev.local_dma_lkey = 0;
	/* The provider raises completion events with this write command, one
	 * of those ib_uverbs offers only to drivers that ask for them. */
	dev->ibdev.uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
	strscpy(dev->ibdev.node_desc, info->node_desc,
		sizeof(dev->ibdev.node_desc));
	ib_set_device_ops(&dev->ibdev, &ibemu_dev_ops);

	dev->parent = platform_device_register_simple(info->name,
						      PLATFORM_DEVID_NONE,
						      NULL, 0);
	if (IS_ERR(dev->parent)) {
		err = PTR_ERR(dev->parent);
		goto fail;
	}
	dev->ibdev.dev.parent = &dev->parent->dev;
	/* No DMA device: ib_core maps kernel buffers to their virtual
	 * addresses, which is what the MAD QPs copy from and to. */
	err = ib_register_device(&dev->ibdev, info->name, NULL);
	if (err) {
		platform_device_unregister(dev->parent);
		goto fail;
	}
	list_add_tail(&dev->node, &ibemu_devices);
	return dev;

fail:
	destroy_workqueue(dev->event_wq);
	ida_destroy(&dev->mr_indexes);
	ib_dealloc_device(&dev->ibdev);
	return ERR_PTR(err);
}

void ibemu_destroy_device(struct ibemu_dev *dev)
{
	lockdep_assert_held(&ibemu_devices_mutex);
	list_del(&dev->node);
	ib_unregister_device(&dev->ibdev);
	platform_device_unregister(dev->parent);
	/* Consumers have destroyed their objects (ib_core's unregister). */
	destroy_workqueue(dev->event_wq);
	ida_destroy(&dev->mr_indexes);
	ida_destroy(&dev->pd_numbers);
	ida_destroy(&dev->cq_handles);
	idr_destroy(&dev->qpns);
	xa_destroy(&dev->mrs);
	xa_destroy(&dev->srqs);
	ib_dealloc_device(&dev->ibdev);
}

static void dispatch(struct ibemu_dev *dev, u8 port, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &dev->ibdev,
		.element.port_num = port,
		.event = type,
	};

	ib_dispatch_event(&ev);
}

/* The events a change of port attributes raises, as an HCA's SMA would. */
static void raise_port_events(struct ibemu_dev *dev, u8 port,
			      const struct ibemu_port_attr *was,
			      const struct ibemu_port_attr *now)
{
	bool active = now->state == IB_PORT_ACTIVE;

	if (active && was->state != IB_PORT_ACTIVE)
		dispatch(dev, port, IB_EVENT_PORT_ACTIVE);
	else if (!active && was->state == IB_PORT_ACTIVE)
		dispatch(dev, port, IB_EVENT_PORT_ERR);
	/* ib_core's GID and P_Key caches refresh on these in any state. */
	if (memcmp(now->pkeys, was->pkeys, sizeof(now->pkeys)))
		dispatch(dev, port, IB_EVENT_PKEY_CHANGE);
	if (now->subnet_prefix != was->subnet_prefix ||
	    now->port_guid != was->port_guid)
		dispatch(dev, port, IB_EVENT_GID_CHANGE);
	if (!active)
		return;
	if (now->lid != was->lid || now->lmc != was->lmc)
		dispatch(dev, port, IB_EVENT_LID_CHANGE);
	if (now->sm_lid != was->sm_lid || now->sm_sl != was->sm_sl)
		dispatch(dev, port, IB_EVENT_SM_CHANGE);
}

/* Called in process context (a write() of the control device). */
void ibemu_set_port(struct ibemu_dev *dev, u8 port,
		    const struct ibemu_port_attr *attr)
{
	struct ibemu_port_attr was;

	spin_lock_irq(&dev->lock);
	was = dev->ports[port - 1];
	dev->ports[port - 1] = *attr;
	spin_unlock_irq(&dev->lock);
	raise_port_events(dev, port, &was, attr);
}

void ibemu_ports_down(struct ibemu_dev *dev)
{
	struct ibemu_port_attr now;
	u8 port;

	for (port = 1; port <= dev->info.num_ports; port++) {
		spin_lock_irq(&dev->lock);
		now = dev->ports[port - 1];
		spin_unlock_irq(&dev->lock);
		port_without_daemon(&now);
		ibemu_set_port(dev, port, &now);
	}
}
