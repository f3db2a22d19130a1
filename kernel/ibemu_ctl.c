// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/ibemu, through which ibemud drives the devices (ibemu_abi.h has the
 * protocol). Root only. One open file is one daemon: the devices it added
 * follow it, and its release takes their ports down.
 */
#include <linux/completion.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "ibemu.h"
#include "ibemu_ctl_validate.h"

/* A daemon that stops reading loses MADs, not kernel memory. */
#define MAX_QUEUED_MESSAGES 4096
#define MAX_DEVICES 64
#define PROCESS_MAD_TIMEOUT HZ

struct ibemu_ctl_file {
	/* Under ibemu_devices_mutex: */
	struct ibemu_dev *devs[IBEMU_CTL_MAX_DEVICES];
	struct ibemu_data_chan *chan; /* the data channel, while open */
	/* Under ibemu_ctl_lock: */
	struct list_head outq;
	unsigned int queued;
	struct list_head pending;
	u32 next_seq;
	wait_queue_head_t wait;
};

struct queued_msg {
	struct list_head node;
	size_t len;
	u8 data[];
};

struct pending_mad {
	struct list_head node;
	u32 seq;
	bool answered;
	int result;
	void *reply;
	struct completion done;
};

/* Guards dev->owner and every control file's queues; taken in any context. */
static DEFINE_SPINLOCK(ibemu_ctl_lock);

static bool enqueue_locked(struct ibemu_ctl_file *f, struct queued_msg *m)
{
	lockdep_assert_held(&ibemu_ctl_lock);
	if (f->queued >= MAX_QUEUED_MESSAGES)
		return false;
	list_add_tail(&m->node, &f->outq);
	f->queued++;
	wake_up_interruptible(&f->wait);
	return true;
}

static struct queued_msg *new_msg(const void *msg, size_t len, gfp_t gfp)
{
	struct queued_msg *m = kmalloc(struct_size(m, data, len), gfp);

	if (m) {
		m->len = len;
		memcpy(m->data, msg, len);
	}
	return m;
}

bool ibemu_ctl_send(struct ibemu_dev *dev, const void *msg, size_t len)
{
	struct queued_msg *m = new_msg(msg, len, GFP_ATOMIC);
	unsigned long flags;
	bool sent = false;

	if (!m)
		return false;
	spin_lock_irqsave(&ibemu_ctl_lock, flags);
	if (dev->owner) {
		m->data[sizeof(struct ibemu_ctl_hdr)] = dev->owner_index;
		sent = enqueue_locked(dev->owner, m);
	}
	spin_unlock_irqrestore(&ibemu_ctl_lock, flags);
	if (!sent)
		kfree(m);
	return sent;
}

static void send_port_caps(struct ibemu_dev *dev, u32 port, u32 set,
			   u32 clear)
{
	struct ibemu_ctl_port_cap msg = {
		.hdr.type = IBEMU_CTL_PORT_CAP,
		.hdr.length = sizeof(msg),
		.port = port,
		.set_mask = set,
		.clear_mask = clear,
	};

	ibemu_ctl_send(dev, &msg, sizeof(msg));
}

/*
 * A consumer's modify_port: the module keeps the bits (dev->consumer_caps)
 * and tells the daemon's SMA if one owns the device; one that takes it
 * later gets them all (give_consumer_caps). Under dev->lock, so that the
 * two never send an older state after a newer one.
 */
void ibemu_ctl_port_caps(struct ibemu_dev *dev, u32 port, u32 set, u32 clear)
{
	unsigned long flags;
	u32 *caps = &dev->consumer_caps[port - 1];

	spin_lock_irqsave(&dev->lock, flags);
	*caps = (*caps | set) & ~clear;
	send_port_caps(dev, port, set, clear);
	spin_unlock_irqrestore(&dev->lock, flags);
}

static void give_consumer_caps(struct ibemu_dev *dev)
{
	u32 port;

	spin_lock_irq(&dev->lock);
	for (port = 1; port <= dev->info.num_ports; port++)
		if (dev->consumer_caps[port - 1])
			send_port_caps(dev, port,
				       dev->consumer_caps[port - 1], 0);
	spin_unlock_irq(&dev->lock);
}

int ibemu_ctl_process_mad(struct ibemu_dev *dev, u8 port, const void *mad,
			  void *reply)
{
	struct ibemu_ctl_process_mad msg = {
		.hdr.type = IBEMU_CTL_PROCESS_MAD,
		.hdr.length = sizeof(msg),
		.port = port,
	};
	struct pending_mad p = { .reply = reply };
	struct ibemu_ctl_file *f;
	struct queued_msg *m;
	bool queued = false;

	/* The answer comes from user space: only a caller that may sleep
	 * can wait for it. */
	if (in_atomic() || irqs_disabled())
		return -EWOULDBLOCK;
	memcpy(msg.mad, mad, IBEMU_CTL_MAD_SIZE);
	m = new_msg(&msg, sizeof(msg), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	init_completion(&p.done);
	INIT_LIST_HEAD(&p.node);

	spin_lock_irq(&ibemu_ctl_lock);
	f = dev->owner;
	if (f) {
		if (++f->next_seq == 0) /* 0 means "no seq" in the ABI */
			++f->next_seq;
		p.seq = f->next_seq;
		((struct ibemu_ctl_process_mad *)m->data)->hdr.seq = p.seq;
		((struct ibemu_ctl_process_mad *)m->data)->index =
			dev->owner_index;
		queued = enqueue_locked(f, m);
		if (queued)
			list_add_tail(&p.node, &f->pending);
	}
	spin_unlock_irq(&ibemu_ctl_lock);
	if (!queued) {
		kfree(m);
		return -ENODEV;
	}

	wait_for_completion_timeout(&p.done, PROCESS_MAD_TIMEOUT);
	spin_lock_irq(&ibemu_ctl_lock);
	list_del_init(&p.node); /* a no-op if the reply or release took it */
	spin_unlock_irq(&ibemu_ctl_lock);
	return p.answered ? p.result : -ETIMEDOUT;
}

static void take_reply(struct ibemu_ctl_file *f,
		       const struct ibemu_ctl_process_mad_reply *r)
{
	struct pending_mad *p;

	spin_lock_irq(&ibemu_ctl_lock);
	list_for_each_entry(p, &f->pending, node) {
		if (p->seq != r->hdr.seq)
			continue;
		if (r->result == IBEMU_CTL_MAD_REPLY)
			memcpy(p->reply, r->mad, IBEMU_CTL_MAD_SIZE);
		p->result = r->result;
		p->answered = true;
		list_del_init(&p->node);
		complete(&p->done);
		break;
	}
	spin_unlock_irq(&ibemu_ctl_lock);
}

static int add_device(struct ibemu_ctl_file *f,
		      const struct ibemu_ctl_add_device *m)
{
	struct ibemu_dev *dev;
	size_t count = 0;
	int err = 0;

	mutex_lock(&ibemu_devices_mutex);
	if (f->devs[m->index]) {
		err = -EEXIST;
		goto out;
	}
	dev = ibemu_find_device(m->name);
	if (dev && READ_ONCE(dev->owner)) {
		err = -EEXIST;
		goto out;
	}
	if (dev && dev->info.num_ports != m->num_ports) {
		err = -EBUSY;
		goto out;
	}
	if (!dev) {
		list_for_each_entry(dev, &ibemu_devices, node)
			count++;
		if (count >= MAX_DEVICES) {
			err = -ENOSPC;
			goto out;
		}
		dev = ibemu_create_device(m);
		if (IS_ERR(dev)) {
			err = PTR_ERR(dev);
			goto out;
		}
	} else {
		/* A daemon back after a restart: the same HCA, new firmware. */
		dev->info = *m;
		dev->ibdev.node_guid = cpu_to_be64(m->node_guid);
	}
	spin_lock_irq(&ibemu_ctl_lock);
	dev->owner = f;
	dev->owner_index = m->index;
	spin_unlock_irq(&ibemu_ctl_lock);
	f->devs[m->index] = dev;
	give_consumer_caps(dev);
	/* A device added while the channel is open joins it (and is
	 * replayed there, as after a daemon restart). */
	if (f->chan)
		ibemu_data_attach(f->chan, dev, m->index);
out:
	mutex_unlock(&ibemu_devices_mutex);
	return err;
}

/* Devices are destroyed only when the module goes, after every control
 * file is closed: a file's devs[] entries stay valid while it is open. */
static struct ibemu_dev *device_of(struct ibemu_ctl_file *f, u8 index, u8 port)
{
	struct ibemu_dev *dev;

	mutex_lock(&ibemu_devices_mutex);
	dev = f->devs[index];
	mutex_unlock(&ibemu_devices_mutex);
	return dev && port <= dev->info.num_ports ? dev : NULL;
}

static int set_port(struct ibemu_ctl_file *f, const struct ibemu_ctl_set_port *m)
{
	struct ibemu_dev *dev = device_of(f, m->index, m->port);
	struct ibemu_port_attr attr = {
		.state = m->state,
		.phys_state = m->phys_state,
		.lid = m->lid,
		.sm_lid = m->sm_lid,
		.lmc = m->lmc,
		.sm_sl = m->sm_sl,
		.max_mtu = m->max_mtu,
		.active_mtu = m->active_mtu,
		.active_width = m->active_width,
		.active_speed = m->active_speed,
		.port_cap_flags = m->port_cap_flags,
		.subnet_prefix = m->subnet_prefix,
		.port_guid = m->port_guid,
	};

	if (!dev)
		return -EINVAL;
	memcpy(attr.pkeys, m->pkeys, sizeof(attr.pkeys));
	ibemu_set_port(dev, m->port, &attr);
	return 0;
}

static int mad_in(struct ibemu_ctl_file *f, const struct ibemu_ctl_mad_in *m)
{
	struct ibemu_dev *dev = device_of(f, m->index, m->port);

	if (!dev)
		return -EINVAL;
	ibemu_deliver_mad(dev, m);
	return 0;
}

union any_msg {
	struct ibemu_ctl_hdr hdr;
	struct ibemu_ctl_add_device add_device;
	struct ibemu_ctl_set_port set_port;
	struct ibemu_ctl_mad_in mad_in;
	struct ibemu_ctl_process_mad_reply reply;
};

static ssize_t ctl_write(struct file *file, const char __user *buf, size_t len,
			 loff_t *off)
{
	struct ibemu_ctl_file *f = file->private_data;
	union any_msg *m;
	int err;

	if (len < sizeof(m->hdr) || len > sizeof(*m))
		return -EINVAL;
	m = kmalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	err = copy_from_user(m, buf, len) ? -EFAULT : ibemu_ctl_validate(m, len);
	if (err)
		goto out;
	switch (m->hdr.type) {
	case IBEMU_CTL_ADD_DEVICE:
		err = add_device(f, &m->add_device);
		break;
	case IBEMU_CTL_SET_PORT:
		err = set_port(f, &m->set_port);
		break;
	case IBEMU_CTL_MAD_IN:
		err = mad_in(f, &m->mad_in);
		break;
	case IBEMU_CTL_PROCESS_MAD_REPLY:
		take_reply(f, &m->reply);
		break;
	}
out:
	kfree(m);
	return err ? err : len;
}

static ssize_t ctl_read(struct file *file, char __user *buf, size_t len,
			loff_t *off)
{
	struct ibemu_ctl_file *f = file->private_data;
	struct queued_msg *m;
	ssize_t ret;

	for (;;) {
		spin_lock_irq(&ibemu_ctl_lock);
		m = list_first_entry_or_null(&f->outq, struct queued_msg, node);
		if (m && m->len <= len) {
			list_del(&m->node);
			f->queued--;
		}
		spin_unlock_irq(&ibemu_ctl_lock);
		if (m)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(f->wait,
					       !list_empty_careful(&f->outq));
		if (ret)
			return ret;
	}
	if (m->len > len)
		return -EINVAL;
	ret = copy_to_user(buf, m->data, m->len) ? -EFAULT : m->len;
	kfree(m);
	return ret;
}

/* The data channel (ibemu_data.c) is the one thing ioctl() does here. */
static long ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct ibemu_ctl_file *f = file->private_data;

	if (cmd != IBEMU_IOC_OPEN_DATA)
		return -ENOTTY;
	return ibemu_data_open(&f->chan, f->devs);
}

static __poll_t ctl_poll(struct file *file, poll_table *wait)
{
	struct ibemu_ctl_file *f = file->private_data;
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &f->wait, wait);
	spin_lock_irq(&ibemu_ctl_lock);
	if (!list_empty(&f->outq))
		mask |= EPOLLIN | EPOLLRDNORM;
	spin_unlock_irq(&ibemu_ctl_lock);
	return mask;
}

static int ctl_open(struct inode *inode, struct file *file)
{
	struct ibemu_ctl_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	INIT_LIST_HEAD(&f->outq);
	INIT_LIST_HEAD(&f->pending);
	init_waitqueue_head(&f->wait);
	file->private_data = f;
	return stream_open(inode, file);
}

static int ctl_release(struct inode *inode, struct file *file)
{
	struct ibemu_ctl_file *f = file->private_data;
	struct queued_msg *m, *next_m;
	struct pending_mad *p, *next_p;
	int i;

	/* The channel first: the devices' records stop with it. */
	ibemu_data_close_ctl(&f->chan);
	mutex_lock(&ibemu_devices_mutex);
	for (i = 0; i < IBEMU_CTL_MAX_DEVICES; i++) {
		if (!f->devs[i])
			continue;
		spin_lock_irq(&ibemu_ctl_lock);
		f->devs[i]->owner = NULL;
		spin_unlock_irq(&ibemu_ctl_lock);
		ibemu_ports_down(f->devs[i]);
	}
	mutex_unlock(&ibemu_devices_mutex);

	spin_lock_irq(&ibemu_ctl_lock);
	list_for_each_entry_safe(p, next_p, &f->pending, node) {
		list_del_init(&p->node);
		complete(&p->done);
	}
	list_for_each_entry_safe(m, next_m, &f->outq, node)
		kfree(m);
	spin_unlock_irq(&ibemu_ctl_lock);
	kfree(f);
	return 0;
}

static const struct file_operations ctl_fops = {
	.owner = THIS_MODULE,
	.open = ctl_open,
	.release = ctl_release,
	.read = ctl_read,
	.write = ctl_write,
	.poll = ctl_poll,
	.unlocked_ioctl = ctl_ioctl,
	/* Its one ioctl takes no argument. */
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice ctl_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = IBEMU_CTL_DEVICE_NAME,
	.fops = &ctl_fops,
	.mode = 0600,
};

int ibemu_ctl_register(void)
{
	return misc_register(&ctl_misc);
}

void ibemu_ctl_unregister(void)
{
	misc_deregister(&ctl_misc);
}
