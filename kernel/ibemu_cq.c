// SPDX-License-Identifier: GPL-2.0
/*
 * CQs (docs/design/kernel-consumers.md, section 6.2). A verbs program's CQ
 * lives in its provider; the kernel's part is its completion channel. A
 * kernel consumer's CQ is a ring of struct ib_wc here, mirrored by a CQ of
 * the daemon's engine (CREATE_CQ, DESTROY_CQ) whose completions come back
 * through IBEMU_IOC_COMPLETE; QP0/QP1 and completions the module makes
 * itself (no daemon) land in the same ring.
 *
 * Arming follows IBA 11.4.2.2: a handler runs at most once per arming, for
 * the next completion or, armed solicited, for a solicited or failed one.
 * It never runs under the CQ's lock: callers add under their locks and fire
 * once they have dropped them.
 */
#include <linux/interrupt.h>
#include <linux/slab.h>

#include "ibemu.h"

static void cq_err_work(struct work_struct *work)
{
	struct ibemu_cq *cq = container_of(work, struct ibemu_cq, err_work);
	struct ib_event ev = {
		.device = cq->ibcq.device,
		.element.cq = &cq->ibcq,
		.event = IB_EVENT_CQ_ERR,
	};

	if (cq->ibcq.event_handler)
		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
}

int ibemu_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		    IBEMU_CREATE_CQ_ARG)
{
	struct ibemu_dev *dev = to_dev(ibcq->device);
	struct ibemu_cq *cq = to_cq(ibcq);
	struct ibemu_data_create_cq create = {
		.hdr.type = IBEMU_DATA_CREATE_CQ,
		.hdr.length = sizeof(create),
	};
	struct ibemu_data_destroy_cq destroy = {
		.hdr.type = IBEMU_DATA_DESTROY_CQ,
		.hdr.length = sizeof(destroy),
	};
	int handle, err;

	if (attr->flags || attr->comp_vector >= ibcq->device->num_comp_vectors)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	cq->user = from_user != NULL;
	if (cq->user) {
		if (attr->cqe < 1 || attr->cqe > dev->info.max_cqe)
			return -EINVAL;
		ibcq->cqe = attr->cqe;
		return 0;
	}
	if (attr->cqe < 1 || attr->cqe > ibemu_max_cqe(dev))
		return -EINVAL;
	cq->dev = dev;
	cq->size = attr->cqe;
	ibcq->cqe = attr->cqe;
	INIT_LIST_HEAD(&cq->fire_node);
	INIT_WORK(&cq->err_work, cq_err_work);
	cq->wcs = kvcalloc(cq->size, sizeof(*cq->wcs), GFP_KERNEL);
	if (!cq->wcs)
		return -ENOMEM;
	handle = ida_alloc_range(&dev->cq_handles, 1, INT_MAX, GFP_KERNEL);
	if (handle < 0) {
		err = handle;
		goto free_wcs;
	}
	cq->handle = handle;
	destroy.cq = handle;
	cq->destroy_cmd = ibemu_data_cmd_alloc(&destroy, sizeof(destroy),
					       GFP_KERNEL);
	if (IS_ERR(cq->destroy_cmd)) {
		err = PTR_ERR(cq->destroy_cmd);
		goto free_handle;
	}
	create.cq = handle;
	create.cqe = cq->size;
	mutex_lock(&dev->obj_mutex);
	err = ibemu_data_queue_command(dev, &create, sizeof(create),
				       GFP_KERNEL);
	if (!err)
		list_add_tail(&cq->node, &dev->kcqs);
	mutex_unlock(&dev->obj_mutex);
	if (err)
		goto free_cmd;
	return 0;

free_cmd:
	ibemu_data_cmd_free(cq->destroy_cmd);
free_handle:
	ida_free(&dev->cq_handles, handle);
free_wcs:
	kvfree(cq->wcs);
	return err;
}

/* ib_core destroys a CQ after the QPs that use it: no COMPLETE can reach
 * it any more (their destroy waited for RCU readers). */
int ibemu_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct ibemu_cq *cq = to_cq(ibcq);
	struct ibemu_dev *dev = cq->dev;

	if (cq->user)
		return 0;
	cancel_work_sync(&cq->err_work);
	mutex_lock(&dev->obj_mutex);
	list_del(&cq->node);
	ibemu_data_cmd_submit(dev, cq->destroy_cmd);
	mutex_unlock(&dev->obj_mutex);
	ida_free(&dev->cq_handles, cq->handle);
	kvfree(cq->wcs);
	return 0;
}

int ibemu_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct ibemu_cq *cq = to_cq(ibcq);
	unsigned long flags;
	int n = 0;

	if (cq->user)
		return 0;
	spin_lock_irqsave(&cq->lock, flags);
	while (n < num_entries && cq->count) {
		wc[n++] = cq->wcs[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

/*
 * A user CQ's entries are in its provider, which alone knows when one lands
 * on an armed CQ: it says so with REQ_NOTIFY_CQ, and the kernel's part is to
 * put the event on the CQ's completion channel. A kernel CQ is armed; its
 * handler runs when a completion comes, never from here.
 */
int ibemu_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct ibemu_cq *cq = to_cq(ibcq);
	unsigned long irqflags;
	int missed = 0;

	if (cq->user) {
		if (ibcq->comp_handler)
			ibcq->comp_handler(ibcq, ibcq->cq_context);
		return 0;
	}
	spin_lock_irqsave(&cq->lock, irqflags);
	/* Next over solicited widens the arming; solicited over next does
	 * not narrow it. */
	if ((flags & IB_CQ_SOLICITED_MASK) == IB_CQ_NEXT_COMP)
		cq->arm = IBEMU_CQ_ARM_NEXT;
	else if (cq->arm == IBEMU_CQ_ARM_NONE)
		cq->arm = IBEMU_CQ_ARM_SOLICITED;
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && cq->count)
		missed = 1;
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return missed;
}

static bool add_locked(struct ibemu_cq *cq, const struct ib_wc *wc,
		       bool solicited)
{
	bool due;

	lockdep_assert_held(&cq->lock);
	if (cq->count == cq->size) {
		/* An overrun (IBA 11.4.2.1): the entry is lost and the CQ
		 * in error, which the consumer hears of asynchronously. */
		if (!cq->overrun) {
			cq->overrun = true;
			queue_work(cq->dev->event_wq, &cq->err_work);
		}
		ibdev_err_ratelimited(cq->ibcq.device,
				      "CQ %u overrun: a completion was lost\n",
				      cq->handle);
		return false;
	}
	cq->wcs[(cq->head + cq->count) % cq->size] = *wc;
	cq->count++;
	due = cq->arm == IBEMU_CQ_ARM_NEXT ||
	      (cq->arm == IBEMU_CQ_ARM_SOLICITED &&
	       (solicited || wc->status != IB_WC_SUCCESS));
	if (due)
		cq->arm = IBEMU_CQ_ARM_NONE;
	return due;
}

static bool cq_add(struct ibemu_cq *cq, const struct ib_wc *wc, bool solicited)
{
	unsigned long flags;
	bool due;

	spin_lock_irqsave(&cq->lock, flags);
	due = add_locked(cq, wc, solicited);
	spin_unlock_irqrestore(&cq->lock, flags);
	return due;
}

bool ibemu_cq_add(struct ibemu_cq *cq, const struct ib_wc *wc)
{
	return cq_add(cq, wc, false);
}

bool ibemu_cq_add_solicited(struct ibemu_cq *cq, const struct ib_wc *wc,
			    bool solicited)
{
	return cq_add(cq, wc, solicited);
}

/*
 * The handlers schedule NAPI, irq_poll or work: with bottom halves disabled
 * around them a softirq they raise from process context runs when they are
 * enabled again, instead of staying pending. In hard interrupt context, or
 * with interrupts off, the interrupt's exit runs it.
 */
void ibemu_cq_fire(struct ibemu_cq *cq)
{
	if (!cq->ibcq.comp_handler)
		return;
	if (in_hardirq() || irqs_disabled()) {
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
		return;
	}
	local_bh_disable();
	cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	local_bh_enable();
}

void ibemu_cq_push(struct ibemu_cq *cq, const struct ib_wc *wc)
{
	if (cq_add(cq, wc, false))
		ibemu_cq_fire(cq);
}

void ibemu_cq_purge_qp(struct ibemu_cq *cq, struct ib_qp *qp)
{
	unsigned long flags;
	u32 i, kept = 0;

	spin_lock_irqsave(&cq->lock, flags);
	for (i = 0; i < cq->count; i++) {
		struct ib_wc *wc = &cq->wcs[(cq->head + i) % cq->size];

		if (wc->qp == qp)
			continue;
		if (kept != i)
			cq->wcs[(cq->head + kept) % cq->size] = *wc;
		kept++;
	}
	cq->count = kept;
	spin_unlock_irqrestore(&cq->lock, flags);
}

/* The CQs of a device for a new channel, under obj_mutex. */
void ibemu_cq_replay(struct ibemu_dev *dev)
{
	struct ibemu_cq *cq;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(cq, &dev->kcqs, node) {
		struct ibemu_data_create_cq create = {
			.hdr.type = IBEMU_DATA_CREATE_CQ,
			.hdr.length = sizeof(create),
			.cq = cq->handle,
			.cqe = cq->size,
		};
		struct ibemu_data_cmd *cmd =
			ibemu_data_cmd_alloc(&create, sizeof(create),
					     GFP_KERNEL);

		if (IS_ERR(cmd)) {
			ibdev_err(&dev->ibdev, "CQ %u not replayed: out of memory\n",
				  cq->handle);
			continue;
		}
		ibemu_data_cmd_submit(dev, cmd);
	}
}
