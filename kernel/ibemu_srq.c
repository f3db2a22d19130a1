// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel consumers' SRQs (docs/design/kernel-consumers.md, section 6.4),
 * which the daemon's engine carries out as a SharedReceiveQueue. A verbs
 * program's SRQ lives in its provider and never comes here.
 *
 * The shadow is a table of slots, one per WQE that may be outstanding, with
 * a free list: the QPs on an SRQ consume its WQEs in any order relative to
 * each other, so completions retire slots in any order. A WQE's token names
 * its slot and that slot's use (a count bumped at each reuse). Posted slots
 * stay on a list in post order, which the replay walks. The data channel's
 * reader finds records through a ring of slot numbers indexed by record
 * number, which posting fills; a slot is reused only after its completion,
 * so the ring entries from the last record delivered to the last posted
 * stay valid (ibemu.h's rule for producers).
 *
 * Locks: dev->obj_mutex (create, modify, destroy, replay) before the SRQ's
 * spinlock (posts, completions, events) before the channel's. A QP's lock
 * may be held when the SRQ's is taken, never the other way round.
 */
#include <linux/log2.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "ibemu.h"
#include "ibemu_ctl_validate.h"

/* A slot's use count in a token: 31 bits above the receive bit. */
#define SRQ_USE_MASK 0x7fffffffu

struct srq_slot {
	u64 wr_id;
	u32 use; /* bumped when the slot is freed: a token names one use */
	u32 seq; /* the number of its record on the channel */
	bool posted;
	struct list_head node; /* srq->posted, in post order, or srq->free */
};

struct srq_event_work {
	struct work_struct work;
	struct ibemu_srq *srq;
	enum ib_event_type event;
};

static inline void *slot_rec(const struct ibemu_srq *srq, u32 index)
{
	return srq->recs + (size_t)index * srq->slot_bytes;
}

/* The channel's reader copies record `seq` out (ibemu.h's rules). */
static unsigned int srq_emit(struct ibemu_data_producer *p, u32 seq, void *buf,
			     unsigned int room)
{
	struct ibemu_srq *srq = container_of(p, struct ibemu_srq, prod);
	const struct ibemu_data_recv_wqe *r =
		slot_rec(srq, srq->ring[seq & (srq->ring_size - 1)]);

	if (r->hdr.length > room)
		return 0;
	memcpy(buf, r, r->hdr.length);
	return r->hdr.length;
}

static void fill_create(const struct ibemu_srq *srq,
			struct ibemu_data_create_srq *r)
{
	memset(r, 0, sizeof(*r));
	r->hdr.type = IBEMU_DATA_CREATE_SRQ;
	r->hdr.length = sizeof(*r);
	r->srq = srq->handle;
	r->pd = srq->pd;
	r->max_wr = srq->max_wr;
	r->max_sge = srq->max_sge;
	r->srq_limit = srq->limit;
}

static void srq_free(struct ibemu_srq *srq)
{
	kvfree(srq->slots);
	kvfree(srq->ring);
	kvfree(srq->recs);
}

u32 ibemu_max_srq_wr(const struct ibemu_dev *dev)
{
	return min_t(u32, dev->info.max_srq_wr, IBEMU_DATA_MAX_WR);
}

int ibemu_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		     struct ib_udata *udata)
{
	struct ibemu_dev *dev = to_dev(ibsrq->device);
	struct ibemu_srq *srq = to_srq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	struct ibemu_data_create_srq create;
	struct ibemu_data_destroy_srq destroy = {
		.hdr.type = IBEMU_DATA_DESTROY_SRQ,
		.hdr.length = sizeof(destroy),
	};
	u32 handle, i;
	int err;

	/* A program's SRQ is its provider's; XRC and tag matching SRQs are
	 * not offered. */
	if (udata)
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (attr->max_wr > ibemu_max_srq_wr(dev) ||
	    attr->max_sge > ibemu_max_sge(dev) ||
	    attr->srq_limit > attr->max_wr)
		return -EINVAL;
	srq->dev = dev;
	spin_lock_init(&srq->lock);
	INIT_LIST_HEAD(&srq->free);
	INIT_LIST_HEAD(&srq->posted);
	/* What is granted: at least one WQE of one SGE, as HCAs round up. */
	srq->max_wr = max_t(u32, attr->max_wr, 1);
	srq->max_sge = max_t(u32, attr->max_sge, 1);
	srq->limit = attr->srq_limit;
	srq->pd = to_pd(ibsrq->pd)->number;
	srq->ring_size = roundup_pow_of_two(srq->max_wr);
	srq->slot_bytes = ibemu_data_recv_wqe_length(srq->max_sge);
	srq->slots = kvcalloc(srq->max_wr, sizeof(*srq->slots), GFP_KERNEL);
	srq->ring = kvcalloc(srq->ring_size, sizeof(*srq->ring), GFP_KERNEL);
	srq->recs = kvcalloc(srq->max_wr, srq->slot_bytes, GFP_KERNEL);
	if (!srq->slots || !srq->ring || !srq->recs) {
		err = -ENOMEM;
		goto free;
	}
	for (i = 0; i < srq->max_wr; i++)
		list_add_tail(&srq->slots[i].node, &srq->free);
	ibemu_data_producer_init(&srq->prod, dev, srq_emit);

	mutex_lock(&dev->obj_mutex);
	err = xa_alloc(&dev->srqs, &handle, srq, XA_LIMIT(1, dev->info.max_srq),
		       GFP_KERNEL);
	if (err) {
		err = err == -EBUSY ? -ENOMEM : err;
		goto unlock;
	}
	srq->handle = handle;
	destroy.srq = handle;
	srq->destroy_cmd = ibemu_data_cmd_alloc(&destroy, sizeof(destroy),
						GFP_KERNEL);
	if (IS_ERR(srq->destroy_cmd)) {
		err = PTR_ERR(srq->destroy_cmd);
		goto erase;
	}
	fill_create(srq, &create);
	err = ibemu_data_queue_command(dev, &create, sizeof(create),
				       GFP_KERNEL);
	if (err)
		goto free_cmd;
	list_add_tail(&srq->node, &dev->ksrqs);
	mutex_unlock(&dev->obj_mutex);
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	return 0;

free_cmd:
	ibemu_data_cmd_free(srq->destroy_cmd);
erase:
	xa_erase(&dev->srqs, handle);
unlock:
	mutex_unlock(&dev->obj_mutex);
free:
	srq_free(srq);
	return err;
}

/* Only the limit changes: resizing is not offered (as the engine's, and
 * several HCAs' SRQs). Arming with 0 disarms. */
int ibemu_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct ibemu_srq *srq = to_srq(ibsrq);
	struct ibemu_dev *dev = srq->dev;
	struct ibemu_data_modify_srq rec = {
		.hdr.type = IBEMU_DATA_MODIFY_SRQ,
		.hdr.length = sizeof(rec),
		.srq = srq->handle,
	};
	int err;

	if (mask & ~IB_SRQ_LIMIT)
		return -EINVAL;
	if (!(mask & IB_SRQ_LIMIT))
		return 0;
	if (attr->srq_limit > srq->max_wr)
		return -EINVAL;
	rec.srq_limit = attr->srq_limit;
	mutex_lock(&dev->obj_mutex);
	err = ibemu_data_queue_command(dev, &rec, sizeof(rec), GFP_KERNEL);
	if (!err) {
		spin_lock_irq(&srq->lock);
		srq->limit = attr->srq_limit;
		spin_unlock_irq(&srq->lock);
	}
	mutex_unlock(&dev->obj_mutex);
	return err;
}

int ibemu_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct ibemu_srq *srq = to_srq(ibsrq);
	unsigned long flags;

	spin_lock_irqsave(&srq->lock, flags);
	attr->srq_limit = srq->limit;
	spin_unlock_irqrestore(&srq->lock, flags);
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	return 0;
}

/* ib_core refuses it while a QP uses the SRQ; its WQEs go with it. Does
 * not wait for the daemon. */
int ibemu_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct ibemu_srq *srq = to_srq(ibsrq);
	struct ibemu_dev *dev = srq->dev;

	mutex_lock(&dev->obj_mutex);
	xa_erase(&dev->srqs, srq->handle);
	list_del(&srq->node);
	spin_lock_irq(&srq->lock);
	ibemu_data_producer_stop(&srq->prod);
	spin_unlock_irq(&srq->lock);
	ibemu_data_cmd_submit(dev, srq->destroy_cmd);
	mutex_unlock(&dev->obj_mutex);
	/* No COMPLETE still holds it, and its events have run. */
	synchronize_rcu();
	flush_workqueue(dev->event_wq);
	srq_free(srq);
	return 0;
}

int ibemu_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct ibemu_srq *srq = to_srq(ibsrq);
	unsigned long flags;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&srq->lock, flags);
	start = srq->head;
	for (; wr; wr = wr->next) {
		struct ibemu_data_recv_wqe *r;
		struct srq_slot *s;
		unsigned int len;
		u32 index;

		if (wr->num_sge < 0 || wr->num_sge > srq->max_sge) {
			err = -EINVAL;
			break;
		}
		s = list_first_entry_or_null(&srq->free, struct srq_slot, node);
		if (!s) {
			err = -ENOMEM;
			break;
		}
		index = s - srq->slots;
		r = slot_rec(srq, index);
		len = ibemu_data_recv_wqe_length(wr->num_sge);
		memset(r, 0, len);
		r->hdr.type = IBEMU_DATA_RECV_WQE;
		r->hdr.length = len;
		/* Bit 32 says "receive" as a QP's receive tokens do. */
		r->token = (u64)(s->use & SRQ_USE_MASK) << 33 | 1ull << 32 | index;
		r->srq = srq->handle;
		r->num_sge = wr->num_sge;
		ibemu_copy_sges(r->sge, wr->sg_list, wr->num_sge);
		s->wr_id = wr->wr_id;
		s->posted = true;
		s->seq = srq->head;
		list_move_tail(&s->node, &srq->posted);
		srq->ring[srq->head & (srq->ring_size - 1)] = index;
		srq->head++;
	}
	/* With no daemon the WQEs wait for the next one (its replay). */
	if (srq->head != start)
		ibemu_data_ring_doorbell(&srq->prod, srq->head);
	spin_unlock_irqrestore(&srq->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}

bool ibemu_srq_retire(struct ibemu_srq *srq, u64 token, u64 *wr_id)
{
	u32 index = (u32)token, use = token >> 33;
	struct srq_slot *s;
	unsigned long flags;
	bool ok = false;

	if (index >= srq->max_wr)
		return false;
	s = &srq->slots[index];
	spin_lock_irqsave(&srq->lock, flags);
	/* Only a WQE the engine got: posted, this use, and delivered. */
	if (s->posted && (s->use & SRQ_USE_MASK) == use &&
	    (s32)(s->seq - READ_ONCE(srq->prod.delivered)) < 0) {
		*wr_id = s->wr_id;
		s->posted = false;
		s->use++;
		list_move_tail(&s->node, &srq->free);
		ok = true;
	}
	spin_unlock_irqrestore(&srq->lock, flags);
	return ok;
}

static void srq_event_work(struct work_struct *work)
{
	struct srq_event_work *w = container_of(work, struct srq_event_work,
						work);
	struct ib_srq *ibsrq = &w->srq->ibsrq;
	struct ib_event ev = {
		.device = ibsrq->device,
		.element.srq = ibsrq,
		.event = w->event,
	};

	if (ibsrq->event_handler)
		ibsrq->event_handler(&ev, ibsrq->srq_context);
	kfree(w);
}

/* In the daemon's thread under RCU: the handler runs on the device's
 * ordered workqueue (design 6.2). */
void ibemu_srq_event(struct ibemu_dev *dev, const struct ibemu_data_event *e)
{
	struct ibemu_srq *srq = xa_load(&dev->srqs, e->handle);
	struct srq_event_work *w;
	unsigned long flags;

	if (!srq || (e->event != IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED &&
		     e->event != IBEMU_DATA_EVENT_SRQ_ERR))
		goto drop;
	if (e->event == IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED) {
		/* One event per arming (IBA 10.2.9.2 / 11.5.2.6): the
		 * engine disarmed it, and query_srq says 0 from now on. */
		spin_lock_irqsave(&srq->lock, flags);
		srq->limit = 0;
		spin_unlock_irqrestore(&srq->lock, flags);
	}
	w = kmalloc(sizeof(*w), GFP_ATOMIC);
	if (!w)
		goto drop;
	INIT_WORK(&w->work, srq_event_work);
	w->srq = srq;
	w->event = e->event;
	queue_work(dev->event_wq, &w->work);
	return;
drop:
	atomic_inc(&dev->dropped_records);
}

/*
 * The SRQs of a device for a new channel (ibemu_data.c's replay, before the
 * QPs that name them): each is created with its armed limit, and every WQE
 * still posted goes again in post order, after the commands. Records get
 * new numbers, from where the last channel left off.
 */
void ibemu_srq_replay(struct ibemu_dev *dev)
{
	struct ibemu_srq *srq;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(srq, &dev->ksrqs, node) {
		struct ibemu_data_create_srq create;
		struct ibemu_data_cmd *cmd;
		struct srq_slot *s;
		u32 base;

		spin_lock_irq(&srq->lock);
		fill_create(srq, &create);
		spin_unlock_irq(&srq->lock);
		cmd = ibemu_data_cmd_alloc(&create, sizeof(create), GFP_KERNEL);
		if (IS_ERR(cmd)) {
			ibdev_err(&dev->ibdev, "SRQ %u not replayed: out of memory\n",
				  srq->handle);
			continue;
		}
		ibemu_data_cmd_submit(dev, cmd);
		spin_lock_irq(&srq->lock);
		ibemu_data_producer_stop(&srq->prod);
		base = srq->head;
		srq->prod.posted = srq->prod.delivered = base;
		list_for_each_entry(s, &srq->posted, node) {
			s->seq = srq->head;
			srq->ring[srq->head & (srq->ring_size - 1)] =
				s - srq->slots;
			srq->head++;
		}
		if (srq->head != base)
			ibemu_data_ring_doorbell(&srq->prod, srq->head);
		spin_unlock_irq(&srq->lock);
	}
}
