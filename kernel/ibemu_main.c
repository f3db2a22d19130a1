// SPDX-License-Identifier: GPL-2.0
/*
 * Module entry: the control device comes first, devices come when ibemud
 * asks for them. Loading without a daemon leaves no device; while a verbs
 * program has a device open, ib_uverbs holds the module and rmmod is refused.
 */
#include <linux/module.h>

#include "ibemu.h"

static int __init ibemu_init(void)
{
	return ibemu_ctl_register();
}

static void __exit ibemu_exit(void)
{
	struct ibemu_dev *dev, *next;

	/* No control file is open (each holds the module), so no daemon can
	 * add a device while they go. */
	ibemu_ctl_unregister();
	mutex_lock(&ibemu_devices_mutex);
	list_for_each_entry_safe(dev, next, &ibemu_devices, node)
		ibemu_destroy_device(dev);
	mutex_unlock(&ibemu_devices_mutex);
}

module_init(ibemu_init);
module_exit(ibemu_exit);

MODULE_DESCRIPTION("ibemu: software-emulated InfiniBand HCAs driven by ibemud");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1");
