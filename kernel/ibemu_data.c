// SPDX-License-Identifier: GPL-2.0
/*
 * The data channel (ibemu_abi.h; docs/design/kernel-consumers.md, section
 * 4): a second file ibemud gets from IBEMU_IOC_OPEN_DATA on its control
 * file. Its read() hands the daemon batches of records, the commands in the
 * order the verbs queued them and then the WQEs their doorbells announce;
 * its ioctls bring back completions and events (IBEMU_IOC_COMPLETE) and move
 * payload (IBEMU_IOC_COPY). The verbs never wait for the daemon: they queue
 * and return, and with no channel open what they queue is dropped, because
 * the replay of the next channel re-creates it.
 *
 * Lifetime. A channel is referenced by its file and, while it is linked, by
 * its control file's pointer to it (the slot). It ends when either file is
 * released: devices and producers are detached, the queued commands freed,
 * readers woken; from then on read() returns 0 (EOF) and the ioctls
 * -ENODEV. The data file does not hold the control file, so that closing
 * the control file alone ends the channel, as the ABI says. Verbs find a
 * channel through dev->chan or a producer's chan under RCU and check `dead`
 * under its lock, which is why it is freed only after a grace period.
 *
 * Locks, outermost first: ibemu_devices_mutex (open, attach, end); a verb's
 * own object lock; chan->lock, a spinlock taken in any context. read_mutex
 * serializes readers and complete_mutex the COMPLETE calls; no spinlock is
 * held across a copy to or from user space.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/mm.h>
#include <linux/poll.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "ibemu.h"
#include "ibemu_ctl_validate.h"

/*
 * Commands the daemon may leave unread. Each one is kernel memory kept for
 * a daemon that has not read it, and one that stops reading must not make
 * that grow without bound; past the limit the verb that would queue one
 * more fails with -ENOMEM. That is the errno ib_core's consumers expect of
 * a create or modify that runs out of resources (a hardware HCA whose
 * command interface is full answers alike), and they handle it by failing
 * that one operation, as a ULP must anyway. Waiting for room is not an
 * option (no verb waits for the daemon, and some run in atomic context),
 * and dropping the command would leave module and engine disagreeing about
 * the object. Commands of ibemu_data_cmd_submit() and of the replay are
 * not counted: a destroy must not fail, and both are bounded by the objects
 * that exist.
 */
#define MAX_QUEUED_COMMANDS 16384

/* The most one read() returns, the batch the daemon's buffer is sized for;
 * also the size of the largest IBEMU_IOC_COMPLETE batch. */
#define BATCH_MAX IBEMU_DATA_MAX_BATCH

struct ibemu_data_cmd {
	struct list_head node;
	bool counted; /* against MAX_QUEUED_COMMANDS */
	u16 len;
	u64 rec[]; /* 8-byte aligned, as the records' checks want */
};

struct ibemu_data_chan {
	struct kref ref;
	struct rcu_head rcu;
	/* The control file's pointer to this channel while they are linked;
	 * both under ibemu_devices_mutex. */
	struct ibemu_data_chan **slot;
	wait_queue_head_t wait;
	struct mutex read_mutex;
	void *stage; /* BATCH_MAX bytes: WQEs on their way out, read_mutex */
	struct mutex complete_mutex;
	void *complete_buf; /* BATCH_MAX bytes, under complete_mutex */

	spinlock_t lock;
	/* Under lock: */
	bool dead;
	/* A device's replay is under way: WQEs wait (see replay()). */
	bool replaying;
	struct list_head commands;
	unsigned int counted; /* queued commands counted against the limit */
	struct list_head doorbells; /* producers with records to deliver */
	struct list_head reading; /* producers a reader is copying out */
	struct ibemu_dev *devs[IBEMU_CTL_MAX_DEVICES];
};

static void chan_release(struct kref *ref)
{
	struct ibemu_data_chan *chan =
		container_of(ref, struct ibemu_data_chan, ref);

	kvfree(chan->stage);
	kvfree(chan->complete_buf);
	mutex_destroy(&chan->read_mutex);
	mutex_destroy(&chan->complete_mutex);
	/* A verb may still hold the pointer under RCU (dev->chan, p->chan):
	 * it finds the channel dead and leaves it alone. */
	kfree_rcu(chan, rcu);
}

static struct ibemu_data_chan *chan_alloc(void)
{
	struct ibemu_data_chan *chan = kzalloc(sizeof(*chan), GFP_KERNEL);

	if (!chan)
		return NULL;
	kref_init(&chan->ref);
	init_waitqueue_head(&chan->wait);
	mutex_init(&chan->read_mutex);
	mutex_init(&chan->complete_mutex);
	spin_lock_init(&chan->lock);
	INIT_LIST_HEAD(&chan->commands);
	INIT_LIST_HEAD(&chan->doorbells);
	INIT_LIST_HEAD(&chan->reading);
	/* Allocated once: neither read() nor COMPLETE allocates. */
	chan->stage = kvmalloc(BATCH_MAX, GFP_KERNEL);
	chan->complete_buf = kvmalloc(BATCH_MAX, GFP_KERNEL);
	if (!chan->stage || !chan->complete_buf) {
		kref_put(&chan->ref, chan_release);
		return NULL;
	}
	return chan;
}

static void wake_reader(struct ibemu_data_chan *chan)
{
	wake_up_interruptible_poll(&chan->wait, EPOLLIN | EPOLLRDNORM);
}

/* ---- commands ---- */

struct ibemu_data_cmd *ibemu_data_cmd_alloc(const void *rec, size_t len,
					    gfp_t gfp)
{
	const struct ibemu_data_hdr *hdr = rec;
	struct ibemu_data_cmd *cmd;
	int err;

	if (WARN_ON_ONCE(len < sizeof(*hdr) || len > BATCH_MAX))
		return ERR_PTR(-EINVAL);
	cmd = kmalloc(struct_size(cmd, rec, DIV_ROUND_UP(len, 8)), gfp);
	if (!cmd)
		return ERR_PTR(-ENOMEM);
	INIT_LIST_HEAD(&cmd->node);
	cmd->counted = false;
	cmd->len = len;
	memcpy(cmd->rec, rec, len);
	/*
	 * The daemon checks every batch and refuses a malformed one whole: a
	 * bad record is the module's bug, caught here before it takes the
	 * other records of its batch with it.
	 */
	err = ibemu_data_record_valid(cmd->rec, len, IBEMU_DATA_TO_DAEMON);
	if (WARN_ONCE(err, "ibemu: malformed data channel command (type %u, %zu bytes)\n",
		      hdr->type, len)) {
		kfree(cmd);
		return ERR_PTR(-EINVAL);
	}
	return cmd;
}

void ibemu_data_cmd_free(struct ibemu_data_cmd *cmd)
{
	kfree(cmd);
}

/* Takes cmd: queued on dev's channel, else freed. */
static int queue_cmd(struct ibemu_dev *dev, struct ibemu_data_cmd *cmd,
		     bool limited)
{
	struct ibemu_data_chan *chan;
	unsigned long flags;
	bool queued = false;
	int err = 0;

	rcu_read_lock();
	chan = rcu_dereference(dev->chan);
	if (chan) {
		spin_lock_irqsave(&chan->lock, flags);
		if (chan->dead) {
			/* It ended since: as with no channel. */
		} else if (limited && chan->counted >= MAX_QUEUED_COMMANDS) {
			err = -ENOMEM;
		} else {
			((struct ibemu_data_hdr *)cmd->rec)->index =
				dev->chan_index;
			cmd->counted = limited;
			chan->counted += limited;
			list_add_tail(&cmd->node, &chan->commands);
			queued = true;
		}
		spin_unlock_irqrestore(&chan->lock, flags);
		if (queued)
			wake_reader(chan);
	}
	rcu_read_unlock();
	if (!queued)
		kfree(cmd);
	return err;
}

int ibemu_data_queue_command(struct ibemu_dev *dev, const void *rec,
			     size_t len, gfp_t gfp)
{
	struct ibemu_data_cmd *cmd = ibemu_data_cmd_alloc(rec, len, gfp);

	if (IS_ERR(cmd))
		return PTR_ERR(cmd);
	return queue_cmd(dev, cmd, true);
}

void ibemu_data_cmd_submit(struct ibemu_dev *dev, struct ibemu_data_cmd *cmd)
{
	queue_cmd(dev, cmd, false);
}

/* ---- doorbells ---- */

void ibemu_data_producer_init(struct ibemu_data_producer *p,
			      struct ibemu_dev *dev,
			      unsigned int (*emit)(struct ibemu_data_producer *,
						   u32, void *, unsigned int))
{
	p->dev = dev;
	p->emit = emit;
	p->chan = NULL;
	INIT_LIST_HEAD(&p->node);
	p->posted = 0;
	p->delivered = 0;
	p->snapshot = 0;
}

/* Under chan->lock: the producer goes idle, its undelivered records with it. */
static void unlink_producer(struct ibemu_data_producer *p)
{
	lockdep_assert_held(&p->chan->lock);
	list_del_init(&p->node);
	p->delivered = p->posted;
	/* Pairs with the owner's smp_load_acquire(): once it sees NULL, the
	 * fields written before are settled and the producer is its own. */
	smp_store_release(&p->chan, NULL);
}

bool ibemu_data_ring_doorbell(struct ibemu_data_producer *p, u32 posted)
{
	struct ibemu_data_chan *chan;
	unsigned long flags;
	bool delivering = false, wake = false;

	rcu_read_lock();
	chan = smp_load_acquire(&p->chan);
	if (!chan)
		chan = rcu_dereference(p->dev->chan);
	if (chan) {
		spin_lock_irqsave(&chan->lock, flags);
		/*
		 * Alive, the channel is the device's (a device leaves its
		 * channel only when it ends), and the producer is linked
		 * there or idle. Dead, its end has unlinked the producer.
		 */
		if (!chan->dead) {
			p->posted = posted;
			if (!p->chan) {
				WRITE_ONCE(p->chan, chan);
				list_add_tail(&p->node, &chan->doorbells);
				wake = true;
			}
			/* Else it waits on the doorbell list already, or
			 * a reader has it and relinks it when done. */
			delivering = true;
		}
		spin_unlock_irqrestore(&chan->lock, flags);
		if (wake)
			wake_reader(chan);
	}
	rcu_read_unlock();
	if (!delivering) {
		/* Idle, and the owner's. */
		p->posted = posted;
		p->delivered = posted;
	}
	return delivering;
}

void ibemu_data_producer_stop(struct ibemu_data_producer *p)
{
	struct ibemu_data_chan *chan;
	unsigned long flags;

	rcu_read_lock();
	chan = smp_load_acquire(&p->chan);
	if (chan) {
		spin_lock_irqsave(&chan->lock, flags);
		/* Unless the reader or the channel's end unlinked it since. */
		if (p->chan == chan)
			unlink_producer(p);
		spin_unlock_irqrestore(&chan->lock, flags);
	}
	rcu_read_unlock();
}

/* ---- read() ---- */

/*
 * Copies the WQEs the doorbells announce into chan->stage, `room` bytes at
 * most, and moves the producers that gave some to the reading list, whose
 * snapshot says how far; commit_reading() makes that their delivered mark
 * once the batch has reached the daemon. Under chan->lock: a producer's
 * owner changes no slot below `posted` that is not yet delivered, and can
 * neither reset nor free its queue without first taking this lock
 * (ibemu_data_producer_stop()). Sets *full when a record did not fit.
 */
static unsigned int stage_wqes(struct ibemu_data_chan *chan,
			       unsigned int room, bool *full)
{
	struct ibemu_data_producer *p, *next;
	unsigned int used = 0;

	lockdep_assert_held(&chan->lock);
	list_for_each_entry_safe(p, next, &chan->doorbells, node) {
		u32 seq = p->delivered;

		while (seq != p->posted) {
			struct ibemu_data_hdr *hdr = chan->stage + used;
			unsigned int n = p->emit(p, seq, hdr, room - used);

			if (!n) {
				*full = true;
				break;
			}
			seq++;
			/* A bad record is the producer's bug; alone it
			 * would make the daemon refuse the whole batch. */
			if (WARN_ON_ONCE(n > room - used ||
					 ibemu_data_record_valid(hdr, n,
						IBEMU_DATA_TO_DAEMON)))
				continue;
			hdr->index = p->dev->chan_index;
			used += n;
		}
		p->snapshot = seq;
		if (seq != p->delivered)
			list_move_tail(&p->node, &chan->reading);
		else if (seq == p->posted)
			unlink_producer(p); /* a doorbell with nothing new */
		if (*full)
			break;
	}
	return used;
}

/* Under chan->lock, after a batch reached the daemon. Returns whether a
 * producer has more to deliver (posted while its records were read). */
static bool commit_reading(struct ibemu_data_chan *chan)
{
	struct ibemu_data_producer *p, *next;
	bool more = false;

	lockdep_assert_held(&chan->lock);
	list_for_each_entry_safe(p, next, &chan->reading, node) {
		p->delivered = p->snapshot;
		if (p->delivered == p->posted) {
			unlink_producer(p);
		} else {
			list_move_tail(&p->node, &chan->doorbells);
			more = true;
		}
	}
	return more;
}

static void free_cmds(struct list_head *cmds)
{
	struct ibemu_data_cmd *cmd, *next;

	list_for_each_entry_safe(cmd, next, cmds, node)
		kfree(cmd);
	INIT_LIST_HEAD(cmds);
}

/*
 * One batch of at most `len` bytes, under read_mutex: 0 when the channel
 * has ended, -EAGAIN when nothing waits, -EINVAL when the next record does
 * not fit, -EFAULT (and nothing lost) when the buffer does not take it.
 */
static ssize_t read_batch(struct ibemu_data_chan *chan, char __user *buf,
			  size_t len)
{
	struct ibemu_data_cmd *cmd, *next;
	LIST_HEAD(cmds);
	size_t cmd_bytes = 0, copied = 0;
	unsigned int wqe_bytes = 0;
	bool full = false, more = false;

	spin_lock_irq(&chan->lock);
	if (chan->dead) {
		spin_unlock_irq(&chan->lock);
		return 0;
	}
	list_for_each_entry_safe(cmd, next, &chan->commands, node) {
		if (cmd->len > len - cmd_bytes) {
			full = true;
			break;
		}
		cmd_bytes += cmd->len;
		chan->counted -= cmd->counted;
		list_move_tail(&cmd->node, &cmds);
	}
	/*
	 * The ordering rule: WQEs go after every command queued before this
	 * batch was taken. While commands stay behind, a WQE posted after
	 * one of them would overtake it, so WQEs wait for the next batch.
	 */
	if (list_empty(&chan->commands) && !chan->replaying)
		wqe_bytes = stage_wqes(chan, len - cmd_bytes, &full);
	if (!cmd_bytes && !wqe_bytes) {
		/* Records dropped as malformed, if any, are done with. */
		commit_reading(chan);
		spin_unlock_irq(&chan->lock);
		return full ? -EINVAL : -EAGAIN;
	}
	spin_unlock_irq(&chan->lock);

	list_for_each_entry(cmd, &cmds, node) {
		if (copy_to_user(buf + copied, cmd->rec, cmd->len))
			goto fault;
		copied += cmd->len;
	}
	if (wqe_bytes && copy_to_user(buf + copied, chan->stage, wqe_bytes))
		goto fault;

	spin_lock_irq(&chan->lock);
	more = commit_reading(chan); /* nothing there if the channel ended */
	spin_unlock_irq(&chan->lock);
	if (more)
		wake_reader(chan);
	free_cmds(&cmds);
	return cmd_bytes + wqe_bytes;

fault:
	/* The records go back, ahead of any queued since. */
	spin_lock_irq(&chan->lock);
	if (!chan->dead) {
		list_for_each_entry(cmd, &cmds, node)
			chan->counted += cmd->counted;
		list_splice_init(&cmds, &chan->commands);
		list_splice_init(&chan->reading, &chan->doorbells);
		more = true;
	}
	spin_unlock_irq(&chan->lock);
	if (more)
		wake_reader(chan); /* another reader may be waiting */
	free_cmds(&cmds);
	return -EFAULT;
}

/* The wait's condition, checked without the lock (read_batch() looks
 * again under it): a wake-up follows every change that makes it true. */
static bool data_ready(struct ibemu_data_chan *chan)
{
	return READ_ONCE(chan->dead) || !list_empty_careful(&chan->commands) ||
	       (!READ_ONCE(chan->replaying) &&
		!list_empty_careful(&chan->doorbells));
}

/* Whole records only: a batch never splits one, and a buffer smaller than
 * the next record gets -EINVAL. */
static ssize_t data_read(struct file *file, char __user *buf, size_t len,
			 loff_t *off)
{
	struct ibemu_data_chan *chan = file->private_data;
	bool nonblock = file->f_flags & O_NONBLOCK;
	ssize_t ret;

	len = min_t(size_t, len, BATCH_MAX);
	for (;;) {
		if (nonblock) {
			/* Another reader is taking what there is. */
			if (!mutex_trylock(&chan->read_mutex))
				return -EAGAIN;
		} else if (mutex_lock_interruptible(&chan->read_mutex)) {
			return -ERESTARTSYS;
		}
		ret = read_batch(chan, buf, len);
		mutex_unlock(&chan->read_mutex);
		if (ret != -EAGAIN || nonblock)
			return ret;
		ret = wait_event_interruptible(chan->wait, data_ready(chan));
		if (ret)
			return ret;
	}
}

static __poll_t data_poll(struct file *file, poll_table *wait)
{
	struct ibemu_data_chan *chan = file->private_data;
	__poll_t mask = 0;

	poll_wait(file, &chan->wait, wait);
	spin_lock_irq(&chan->lock);
	if (chan->dead)
		mask = EPOLLIN | EPOLLRDNORM | EPOLLHUP; /* read() says EOF */
	else if (!list_empty(&chan->commands) ||
		 (!chan->replaying && !list_empty(&chan->doorbells)))
		mask = EPOLLIN | EPOLLRDNORM;
	spin_unlock_irq(&chan->lock);
	return mask;
}

/* ---- ioctls: completions and copies ---- */

/*
 * A checked batch of CQE and EVENT records (design, section 6.2), in the
 * daemon's thread. Each names its device by the channel's index and its QP
 * by QPN; what names no live object or WQE (a QP destroyed meanwhile, a
 * WQE flushed by a RESET) is dropped and counted. Then the handlers of the
 * CQs that became due run, with bottom halves disabled and no lock of the
 * module held (RCU keeps the QPs and their CQs alive: their destroy waits
 * for it).
 */
static long apply_completions(struct ibemu_data_chan *chan, const void *buf,
			      u32 len)
{
	struct ibemu_dev *devs[IBEMU_CTL_MAX_DEVICES];
	struct ibemu_cq *cq, *next;
	LIST_HEAD(fire);
	u32 at;

	spin_lock_irq(&chan->lock);
	memcpy(devs, chan->devs, sizeof(devs));
	spin_unlock_irq(&chan->lock);

	rcu_read_lock();
	for (at = 0; at < len;) {
		const struct ibemu_data_hdr *hdr = buf + at;
		struct ibemu_dev *dev = devs[hdr->index];

		at += hdr->length;
		if (!dev)
			continue;
		if (hdr->type == IBEMU_DATA_CQE)
			ibemu_kqp_cqe(dev, (const void *)hdr, &fire);
		else
			ibemu_kqp_event(dev, (const void *)hdr);
	}
	list_for_each_entry_safe(cq, next, &fire, fire_node) {
		list_del_init(&cq->fire_node);
		cq->fire = false;
		ibemu_cq_fire(cq);
	}
	rcu_read_unlock();
	return 0;
}

static long data_complete(struct ibemu_data_chan *chan,
			  struct ibemu_data_complete __user *uarg)
{
	struct ibemu_data_complete arg;
	long err;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (ibemu_data_complete_valid(&arg))
		return -EINVAL;
	if (mutex_lock_interruptible(&chan->complete_mutex))
		return -ERESTARTSYS;
	/* Every record is checked before any is acted on (ABI: a malformed
	 * one gets EINVAL and nothing happens). */
	if (copy_from_user(chan->complete_buf, u64_to_user_ptr(arg.records),
			   arg.length))
		err = -EFAULT;
	else if (ibemu_data_batch_valid(chan->complete_buf, arg.length,
					IBEMU_DATA_TO_MODULE))
		err = -EINVAL;
	else
		err = apply_completions(chan, chan->complete_buf, arg.length);
	mutex_unlock(&chan->complete_mutex);
	return err;
}

/* One checked segment: the bytes moved or an errno (ibemu_mr.c). */
static long copy_segment(struct ibemu_data_chan *chan,
			 const struct ibemu_data_copy_segment *seg,
			 void *bounce)
{
	struct ibemu_dev *dev;

	spin_lock_irq(&chan->lock);
	dev = chan->devs[seg->index];
	spin_unlock_irq(&chan->lock);
	if (!dev)
		return -ENOENT;
	return ibemu_mr_copy(dev, seg, bounce);
}

static long data_copy(struct ibemu_data_chan *chan,
		      struct ibemu_data_copy __user *uarg)
{
	struct ibemu_data_copy_segment __user *segs;
	struct ibemu_data_copy arg;
	long moved = 0, err = 0;
	void *bounce;
	u32 i;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (ibemu_data_copy_valid(&arg))
		return -EINVAL;
	/* Kernel memory goes through a page of the module's own: the
	 * daemon's copies never check a ULP's objects against usercopy's
	 * whitelists. */
	bounce = kmalloc(PAGE_SIZE, GFP_KERNEL);
	if (!bounce)
		return -ENOMEM;
	segs = u64_to_user_ptr(arg.segments);
	/* In order, up to the first that fails (ABI). */
	for (i = 0; i < arg.count; i++) {
		struct ibemu_data_copy_segment seg;

		if (copy_from_user(&seg, &segs[i], sizeof(seg))) {
			err = -EFAULT;
			break;
		}
		if (ibemu_data_copy_segment_valid(&seg)) {
			err = -EINVAL;
			break;
		}
		err = copy_segment(chan, &seg, bounce);
		if (err < 0)
			break;
		moved += err;
		err = 0;
	}
	kfree(bounce);
	if (put_user(i, &uarg->done))
		return -EFAULT;
	return err ? err : moved;
}

static long data_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct ibemu_data_chan *chan = file->private_data;

	if (cmd != IBEMU_IOC_COMPLETE && cmd != IBEMU_IOC_COPY)
		return -ENOTTY;
	/* An ended channel's objects are flushed already: what the daemon
	 * still says about them is too late. */
	if (READ_ONCE(chan->dead))
		return -ENODEV;
	if (cmd == IBEMU_IOC_COMPLETE)
		return data_complete(chan, (void __user *)arg);
	return data_copy(chan, (void __user *)arg);
}

/* ---- opening and ending ---- */

/*
 * Tells a channel that has just taken `dev` about every kernel object the
 * device has, as the commands (and WQEs) that re-create it in an empty
 * engine (design, section 6.8). The same path serves a daemon that starts
 * after the ULPs and one that restarts. Its commands are submitted
 * uncounted (ibemu_data_cmd_submit): they are bounded by the objects that
 * exist.
 *
 * Under dev->obj_mutex, which ibemu_data_attach() takes before it publishes
 * dev->chan and holds to the end of the replay: the verbs that create,
 * change or destroy objects hold it too, so each object is announced to the
 * channel exactly once, by the replay or by its own verb. While it runs the
 * channel delivers commands only (chan->replaying): a WQE posted meanwhile
 * waits, so that it follows its QP's replayed commands, and receives that
 * the replay posts again are never delivered twice.
 *
 * In order: CQs, MRs (DMA MRs, and FRWR MRs free: a registration dies with
 * its engine), SRQs with their armed limits and posted receives, QPs: UD
 * ones driven from RESET to their state with their groups and receives, RC
 * and UC ones in RESET or ERR (their connections died with the last engine).
 */
static void replay(struct ibemu_data_chan *chan, struct ibemu_dev *dev)
{
	lockdep_assert_held(&dev->obj_mutex);
	ibemu_cq_replay(dev);
	ibemu_mr_replay(dev);
	ibemu_srq_replay(dev);
	ibemu_kqp_replay(dev);
}

/*
 * The channel that served `dev` has ended, and with it what the engine held
 * for the device (design, section 6.8): UD sends complete (datagrams lost on
 * a dead link), UD receives stay for the replay, a QP in ERR flushes, and
 * RC and UC QPs go to ERR with QP_FATAL and flush (their connections). Runs
 * once per ended channel, before the next channel's replay: from
 * report_lost() with no lock held, or from that attach if it comes first.
 * Under dev->obj_mutex.
 */
static void channel_lost(struct ibemu_dev *dev)
{
	lockdep_assert_held(&dev->obj_mutex);
	if (!dev->lost_pending)
		return;
	dev->lost_pending = false;
	ibemu_kqp_channel_lost(dev);
}

void ibemu_data_attach(struct ibemu_data_chan *chan, struct ibemu_dev *dev,
		       u8 index)
{
	lockdep_assert_held(&ibemu_devices_mutex);
	/* A device changes hands only after its last channel has ended. */
	WARN_ON_ONCE(rcu_access_pointer(dev->chan));
	mutex_lock(&dev->obj_mutex);
	channel_lost(dev);
	spin_lock_irq(&chan->lock);
	chan->devs[index] = dev;
	dev->chan_index = index;
	chan->replaying = true;
	rcu_assign_pointer(dev->chan, chan);
	spin_unlock_irq(&chan->lock);
	replay(chan, dev);
	spin_lock_irq(&chan->lock);
	chan->replaying = false;
	spin_unlock_irq(&chan->lock);
	mutex_unlock(&dev->obj_mutex);
	wake_reader(chan);
}

/*
 * Ends the channel, once: detaches its devices and producers, drops what is
 * queued, wakes readers and pollers, and unlinks it from its control file
 * (dropping that reference). The devices it served go to `lost` for
 * channel_lost(), which runs once the mutex is released.
 */
static void end_locked(struct ibemu_data_chan *chan,
		       struct ibemu_dev *lost[IBEMU_CTL_MAX_DEVICES])
{
	struct ibemu_data_producer *p, *next;
	LIST_HEAD(cmds);
	int i;

	lockdep_assert_held(&ibemu_devices_mutex);
	spin_lock_irq(&chan->lock);
	if (chan->dead) {
		spin_unlock_irq(&chan->lock);
		return;
	}
	WRITE_ONCE(chan->dead, true);
	for (i = 0; i < IBEMU_CTL_MAX_DEVICES; i++) {
		if (!chan->devs[i])
			continue;
		RCU_INIT_POINTER(chan->devs[i]->chan, NULL);
		chan->devs[i]->lost_pending = true;
		lost[i] = chan->devs[i];
		chan->devs[i] = NULL;
	}
	list_splice_init(&chan->commands, &cmds);
	chan->counted = 0;
	list_for_each_entry_safe(p, next, &chan->doorbells, node)
		unlink_producer(p);
	list_for_each_entry_safe(p, next, &chan->reading, node)
		unlink_producer(p);
	spin_unlock_irq(&chan->lock);

	wake_up_interruptible_poll(&chan->wait,
				   EPOLLIN | EPOLLRDNORM | EPOLLHUP);
	free_cmds(&cmds);
	if (chan->slot) {
		*chan->slot = NULL;
		chan->slot = NULL;
		kref_put(&chan->ref, chan_release); /* the link's */
	}
}

static void report_lost(struct ibemu_dev *lost[IBEMU_CTL_MAX_DEVICES])
{
	int i;

	for (i = 0; i < IBEMU_CTL_MAX_DEVICES; i++) {
		if (!lost[i])
			continue;
		mutex_lock(&lost[i]->obj_mutex);
		channel_lost(lost[i]);
		mutex_unlock(&lost[i]->obj_mutex);
	}
}

void ibemu_data_close_ctl(struct ibemu_data_chan **slot)
{
	struct ibemu_dev *lost[IBEMU_CTL_MAX_DEVICES] = {};

	mutex_lock(&ibemu_devices_mutex);
	if (*slot)
		end_locked(*slot, lost);
	mutex_unlock(&ibemu_devices_mutex);
	report_lost(lost);
}

/* The last reference to the data file: no read() or ioctl() of it runs. */
static int data_release(struct inode *inode, struct file *file)
{
	struct ibemu_data_chan *chan = file->private_data;
	struct ibemu_dev *lost[IBEMU_CTL_MAX_DEVICES] = {};

	mutex_lock(&ibemu_devices_mutex);
	end_locked(chan, lost);
	mutex_unlock(&ibemu_devices_mutex);
	report_lost(lost);
	kref_put(&chan->ref, chan_release); /* the file's */
	return 0;
}

static const struct file_operations data_fops = {
	.owner = THIS_MODULE,
	.read = data_read,
	.poll = data_poll,
	.unlocked_ioctl = data_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.release = data_release,
};

int ibemu_data_open(struct ibemu_data_chan **slot,
		    struct ibemu_dev *const *devs)
{
	struct ibemu_data_chan *chan;
	struct file *file;
	bool busy;
	int fd, i;

	/* The cheap answer first (asked again below, under the same lock). */
	mutex_lock(&ibemu_devices_mutex);
	busy = *slot != NULL;
	mutex_unlock(&ibemu_devices_mutex);
	if (busy)
		return -EBUSY;

	chan = chan_alloc();
	if (!chan)
		return -ENOMEM;
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		kref_put(&chan->ref, chan_release);
		return fd;
	}
	/* From here the file holds the channel's first reference. */
	file = anon_inode_getfile("[ibemu-data]", &data_fops, chan, O_RDWR);
	if (IS_ERR(file)) {
		put_unused_fd(fd);
		kref_put(&chan->ref, chan_release);
		return PTR_ERR(file);
	}

	mutex_lock(&ibemu_devices_mutex);
	if (*slot) {
		mutex_unlock(&ibemu_devices_mutex);
		put_unused_fd(fd);
		fput(file); /* its release ends a channel never linked */
		return -EBUSY;
	}
	kref_get(&chan->ref); /* the link's */
	chan->slot = slot;
	*slot = chan;
	for (i = 0; i < IBEMU_CTL_MAX_DEVICES; i++)
		if (devs[i])
			ibemu_data_attach(chan, devs[i], i);
	mutex_unlock(&ibemu_devices_mutex);
	/* Only now can another thread close it (and so end the channel). */
	fd_install(fd, file);
	return fd;
}
