// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel consumers' RC, UC and UD QPs, which the daemon's engine carries
 * out (docs/design/kernel-consumers.md, sections 6.3, 6.5, 6.7 and 6.8).
 * The module has no transport of its own: PSNs, acknowledgements, retries
 * and key checks are the engine's.
 *
 * The module holds the authoritative shadow of each QP: its state and
 * attributes, and rings of the records its WQEs became, each slot with the
 * wr_id and what its completion reports. Verbs check, update the shadow and
 * queue commands (CREATE_QP, MODIFY_QP, DESTROY_QP, MCAST_*); posts build
 * records in the rings' slots and ring the data channel's doorbell, which
 * allocates nothing. The engine's completions name a WQE by its token: the
 * QP's generation (bumped by each RESET), the queue, and the WQE's number.
 *
 * Locks: dev->obj_mutex (create, modify, destroy, multicast, replay,
 * channel loss) before the QP's spinlock (posts, completions, the shadow)
 * before the channel's. CQ handlers run with none held.
 */
#include <linux/log2.h>
#include <linux/rculist.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "ibemu.h"
#include "ibemu_ctl_validate.h"

/* The QP's generation in a token: 31 bits above the queue bit. */
#define TOKEN_GEN_MASK 0x7fffffffu

struct slot_meta {
	u64 wr_id;
	u16 len; /* bytes of the record in the slot */
	u8 wc_opcode; /* enum ib_wc_opcode of its completion */
	bool signaled;
};

struct ibemu_wq {
	struct ibemu_data_producer prod;
	struct ibemu_kqp *qp;
	bool recv;
	u32 size; /* slots, a power of two */
	u32 max_wr; /* outstanding WQEs at most */
	u32 max_sge;
	u32 slot_bytes;
	/* WQE numbers: the next to post, and the oldest outstanding. */
	u32 head, tail;
	struct slot_meta *meta;
	u8 *recs;
};

struct kqp_mcast {
	struct list_head node;
	union ib_gid gid;
	u16 lid;
};

struct ibemu_kqp {
	struct ibemu_qp *qp;
	struct ibemu_dev *dev;
	spinlock_t lock;
	/* Under lock: */
	enum ib_qp_state state;
	u32 gen;
	u32 modify_seq;
	/*
	 * The attributes the modifies set, in the engine's shape (each field
	 * as the last modify naming it left it; attr_mask: those ever set),
	 * for query_qp and the replay.
	 */
	struct ibemu_data_modify_qp attrs;
	/* LAST_WQE_REACHED went to the ULP since the QP last left RESET. */
	bool last_wqe;
	bool sq_sig_all;
	u32 pd;
	u32 max_inline;
	struct ibemu_cq *send_cq, *recv_cq;
	/* Receives come from it, not from rq (which is then empty). */
	struct ibemu_srq *srq;
	struct ibemu_wq sq, rq;
	/* Under dev->obj_mutex: */
	struct list_head mcast;
	struct list_head node; /* dev->kqps */
	struct ibemu_data_cmd *destroy_cmd;
};

struct kqp_event_work {
	struct work_struct work;
	struct ibemu_kqp *k;
	enum ib_event_type event;
};

static inline u64 make_token(const struct ibemu_kqp *k, bool recv, u32 seq)
{
	return ((u64)(k->gen & TOKEN_GEN_MASK) << 33) | ((u64)recv << 32) | seq;
}

static inline void *slot(const struct ibemu_wq *wq, u32 seq)
{
	return wq->recs + (size_t)(seq & (wq->size - 1)) * wq->slot_bytes;
}

static inline struct slot_meta *meta(const struct ibemu_wq *wq, u32 seq)
{
	return &wq->meta[seq & (wq->size - 1)];
}

/* The channel's reader copies a record out (ibemu_data.h's rules). */
static unsigned int wq_emit(struct ibemu_data_producer *p, u32 seq, void *buf,
			    unsigned int room)
{
	struct ibemu_wq *wq = container_of(p, struct ibemu_wq, prod);
	unsigned int len = meta(wq, seq)->len;

	if (len > room)
		return 0;
	memcpy(buf, slot(wq, seq), len);
	return len;
}

static int wq_init(struct ibemu_wq *wq, struct ibemu_kqp *k, bool recv,
		   u32 max_wr, u32 max_sge, u32 slot_bytes)
{
	wq->qp = k;
	wq->recv = recv;
	wq->max_wr = max_wr;
	wq->max_sge = max_sge;
	wq->size = roundup_pow_of_two(max_t(u32, max_wr, 1));
	wq->slot_bytes = slot_bytes;
	wq->meta = kvcalloc(wq->size, sizeof(*wq->meta), GFP_KERNEL);
	wq->recs = kvcalloc(wq->size, slot_bytes, GFP_KERNEL);
	if (!wq->meta || !wq->recs)
		return -ENOMEM;
	ibemu_data_producer_init(&wq->prod, k->dev, wq_emit);
	return 0;
}

static void wq_free(struct ibemu_wq *wq)
{
	kvfree(wq->meta);
	kvfree(wq->recs);
}

/*
 * Completes the outstanding WQEs of a queue in the module (no engine has
 * them): with `status`, signaled sends and every receive, or every WQE when
 * it is an error. Under the QP's lock, with the producer idle. Returns
 * whether the CQ's handler is due.
 */
static bool complete_locally(struct ibemu_kqp *k, struct ibemu_wq *wq,
			     enum ib_wc_status status)
{
	struct ibemu_cq *cq = wq->recv ? k->recv_cq : k->send_cq;
	bool due = false;

	lockdep_assert_held(&k->lock);
	for (; wq->tail != wq->head; wq->tail++) {
		const struct slot_meta *m = meta(wq, wq->tail);
		struct ib_wc wc = {
			.wr_id = m->wr_id,
			.status = status,
			.opcode = m->wc_opcode,
			.qp = &k->qp->ibqp,
			.port_num = k->attrs.port,
		};

		if (status == IB_WC_SUCCESS && !wq->recv && !m->signaled)
			continue;
		due |= ibemu_cq_add(cq, &wc);
	}
	return due;
}

/* Runs the handlers complete_locally() said are due, with no lock held. */
static void fire(struct ibemu_kqp *k, bool sdue, bool rdue)
{
	if (sdue)
		ibemu_cq_fire(k->send_cq);
	if (rdue)
		ibemu_cq_fire(k->recv_cq);
}

static bool queue_event(struct ibemu_kqp *k, enum ib_event_type event,
			gfp_t gfp);

/*
 * A QP on an SRQ that enters ERR takes no more WQEs from it, and says so
 * once (IBA 11.6.3.1; 10.2.9.5): the ULP waits for it before it destroys
 * the QP. The module raises it when it moves the QP to ERR itself (no
 * engine); the engine's own, for the same entry into ERR, is then dropped.
 * Under the QP's lock.
 */
static void last_wqe_reached(struct ibemu_kqp *k, gfp_t gfp)
{
	lockdep_assert_held(&k->lock);
	if (!k->srq || k->last_wqe)
		return;
	k->last_wqe = true;
	queue_event(k, IB_EVENT_QP_LAST_WQE_REACHED, gfp);
}

/* ---- create, modify, query, destroy ---- */

static u32 send_slot_bytes(u32 max_sge, u32 max_inline)
{
	return max(ibemu_data_send_wqe_length(max_sge, 0),
		   ibemu_data_send_wqe_length(0, max_inline));
}

/* The QP as the engine creates it: in RESET, its capacities as granted. */
static void fill_create(const struct ibemu_kqp *k, u32 qpn,
			struct ibemu_data_create_qp *r)
{
	memset(r, 0, sizeof(*r));
	r->hdr.type = IBEMU_DATA_CREATE_QP;
	r->hdr.length = sizeof(*r);
	r->qpn = qpn;
	r->pd = k->pd;
	r->send_cq = k->send_cq->handle;
	r->recv_cq = k->recv_cq->handle;
	r->srq = k->srq ? k->srq->handle : 0;
	r->max_send_wr = k->sq.max_wr;
	r->max_recv_wr = k->rq.max_wr;
	r->max_send_sge = k->sq.max_sge;
	r->max_recv_sge = k->rq.max_sge;
	r->max_inline_data = k->max_inline;
	/* Shared values with the engine (build checks in ibemu_verbs.c). */
	r->qp_type = k->qp->ibqp.qp_type;
	r->sq_sig_all = k->sq_sig_all;
}

int ibemu_create_kqp(struct ib_qp *ibqp, struct ib_qp_init_attr *init)
{
	struct ibemu_dev *dev = to_dev(ibqp->device);
	struct ibemu_qp *qp = to_qp(ibqp);
	struct ibemu_data_create_qp create;
	struct ibemu_data_destroy_qp destroy = {
		.hdr.type = IBEMU_DATA_DESTROY_QP,
		.hdr.length = sizeof(destroy),
	};
	struct ib_qp_cap *cap = &init->cap;
	u32 first = dev->info.kernel_qpn_first;
	u32 count = dev->info.kernel_qpn_count;
	struct ibemu_kqp *k;
	int qpn, err;

	if (init->qp_type != IB_QPT_RC && init->qp_type != IB_QPT_UC &&
	    init->qp_type != IB_QPT_UD)
		return -EOPNOTSUPP;
	if (init->create_flags || !init->send_cq || !init->recv_cq)
		return -EINVAL;
	/* A QP on an SRQ has no receive queue of its own. */
	if (init->srq) {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}
	if (to_cq(init->send_cq)->user || to_cq(init->recv_cq)->user)
		return -EINVAL;
	if (cap->max_send_wr > ibemu_max_qp_wr(dev) ||
	    cap->max_recv_wr > ibemu_max_qp_wr(dev) ||
	    cap->max_send_sge > ibemu_max_sge(dev) ||
	    cap->max_recv_sge > ibemu_max_sge(dev) ||
	    cap->max_inline_data > IBEMU_DATA_MAX_INLINE)
		return -EINVAL;
	if (!count)
		return -ENOSPC;

	k = kzalloc(sizeof(*k), GFP_KERNEL);
	if (!k)
		return -ENOMEM;
	k->qp = qp;
	k->dev = dev;
	spin_lock_init(&k->lock);
	INIT_LIST_HEAD(&k->mcast);
	k->state = IB_QPS_RESET;
	k->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	k->pd = to_pd(ibqp->pd)->number;
	k->max_inline = cap->max_inline_data;
	k->send_cq = to_cq(init->send_cq);
	k->recv_cq = to_cq(init->recv_cq);
	k->srq = init->srq ? to_srq(init->srq) : NULL;
	k->attrs.port = 1;
	/* What a UD QP reports (its messages are limited by the port's). */
	if (init->qp_type == IB_QPT_UD)
		k->attrs.path_mtu = IB_MTU_4096;
	err = wq_init(&k->sq, k, false, cap->max_send_wr, cap->max_send_sge,
		      send_slot_bytes(cap->max_send_sge, k->max_inline));
	if (!err)
		err = wq_init(&k->rq, k, true, cap->max_recv_wr,
			      cap->max_recv_sge,
			      ibemu_data_recv_wqe_length(cap->max_recv_sge));
	if (err)
		goto free;

	mutex_lock(&dev->obj_mutex);
	qpn = idr_alloc_cyclic(&dev->qpns, k, first, first + count,
			       GFP_KERNEL);
	if (qpn < 0) {
		err = qpn == -ENOSPC ? -ENOMEM : qpn;
		goto unlock;
	}
	destroy.qpn = qpn;
	k->destroy_cmd = ibemu_data_cmd_alloc(&destroy, sizeof(destroy),
					      GFP_KERNEL);
	if (IS_ERR(k->destroy_cmd)) {
		err = PTR_ERR(k->destroy_cmd);
		goto remove;
	}
	fill_create(k, qpn, &create);
	err = ibemu_data_queue_command(dev, &create, sizeof(create),
				       GFP_KERNEL);
	if (err)
		goto free_cmd;
	list_add_tail(&k->node, &dev->kqps);
	qp->dev = dev;
	qp->kqp = k;
	ibqp->qp_num = qpn;
	mutex_unlock(&dev->obj_mutex);
	/* What was asked is what there is (the rings may be larger). */
	return 0;

free_cmd:
	ibemu_data_cmd_free(k->destroy_cmd);
remove:
	idr_remove(&dev->qpns, qpn);
unlock:
	mutex_unlock(&dev->obj_mutex);
free:
	wq_free(&k->sq);
	wq_free(&k->rq);
	kfree(k);
	return err;
}

/* The attributes a kernel QP's modify may name (IB_QP_ALT_PATH, IB_QP_CAP
 * and IB_QP_RATE_LIMIT are not among them). */
#define KQP_MODIFY_MASK                                                      \
	(IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_EN_SQD_ASYNC_NOTIFY |          \
	 IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY |    \
	 IB_QP_AV | IB_QP_PATH_MTU | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |        \
	 IB_QP_RNR_RETRY | IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC |            \
	 IB_QP_PATH_MIG_STATE | IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN |          \
	 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_DEST_QPN)

static void fill_av(struct ibemu_data_av *av, const struct ibemu_ah *ah)
{
	memset(av, 0, sizeof(*av));
	av->dlid = ah->dlid;
	av->sl = ah->sl & 0xf;
	av->src_path_bits = ah->path_bits & 0x7f;
	av->port = ah->port_num <= IBEMU_CTL_MAX_PORTS ? ah->port_num : 0;
	av->is_global = ah->has_grh;
	if (ah->has_grh) {
		memcpy(av->dgid, ah->grh.dgid.raw, sizeof(av->dgid));
		av->flow_label = ah->grh.flow_label & 0xfffff;
		av->sgid_index = ah->grh.sgid_index;
		av->hop_limit = ah->grh.hop_limit;
		av->traffic_class = ah->grh.traffic_class;
	}
}

static void fill_av_attr(struct ibemu_data_av *av,
			 const struct rdma_ah_attr *attr)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(attr);

	memset(av, 0, sizeof(*av));
	av->dlid = rdma_ah_get_dlid(attr);
	av->sl = rdma_ah_get_sl(attr) & 0xf;
	av->src_path_bits = rdma_ah_get_path_bits(attr) & 0x7f;
	av->port = rdma_ah_get_port_num(attr);
	if (rdma_ah_get_ah_flags(attr) & IB_AH_GRH) {
		av->is_global = 1;
		memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
		av->flow_label = grh->flow_label & 0xfffff;
		av->sgid_index = grh->sgid_index;
		av->hop_limit = grh->hop_limit;
		av->traffic_class = grh->traffic_class;
	}
}

/* The reverse, for query_qp (ib_query_qp() wants no sgid_attr). */
static void av_to_attr(const struct ibemu_data_av *av,
		       struct rdma_ah_attr *attr)
{
	attr->type = RDMA_AH_ATTR_TYPE_IB;
	rdma_ah_set_dlid(attr, av->dlid);
	rdma_ah_set_sl(attr, av->sl);
	rdma_ah_set_path_bits(attr, av->src_path_bits);
	rdma_ah_set_port_num(attr, av->port);
	if (av->is_global) {
		union ib_gid dgid;

		memcpy(dgid.raw, av->dgid, sizeof(dgid.raw));
		rdma_ah_set_grh(attr, &dgid, av->flow_label, av->sgid_index,
				av->hop_limit, av->traffic_class);
	}
}

/* Range checks ib_modify_qp_is_ok() leaves to the driver. */
static int check_attr(struct ibemu_dev *dev, const struct ib_qp_attr *attr,
		      int mask, u8 qp_port)
{
	u8 port = (mask & IB_QP_PORT) ? attr->port_num : qp_port;
	enum ib_mtu port_max_mtu = IB_MTU_4096;
	unsigned long flags;

	if ((mask & IB_QP_PORT) &&
	    (attr->port_num < 1 || attr->port_num > dev->info.num_ports))
		return -EINVAL;
	if (port >= 1 && port <= dev->info.num_ports) {
		spin_lock_irqsave(&dev->lock, flags);
		port_max_mtu = dev->ports[port - 1].max_mtu;
		spin_unlock_irqrestore(&dev->lock, flags);
	}
	if ((mask & IB_QP_PKEY_INDEX) && attr->pkey_index >= IBEMU_CTL_MAX_PKEYS)
		return -EINVAL;
	if ((mask & IB_QP_PATH_MTU) &&
	    (attr->path_mtu < IB_MTU_256 || attr->path_mtu > port_max_mtu))
		return -EINVAL;
	if ((mask & IB_QP_TIMEOUT) && attr->timeout > 31)
		return -EINVAL;
	if ((mask & IB_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IB_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IB_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return -EINVAL;
	if ((mask & IB_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16)
		return -EINVAL;
	if ((mask & IB_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16)
		return -EINVAL;
	if ((mask & IB_QP_RQ_PSN) && attr->rq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_SQ_PSN) && attr->sq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_EN_SQD_ASYNC_NOTIFY) && attr->en_sqd_async_notify > 1)
		return -EINVAL;
	/* IB_QP_PATH_MIG_STATE: any value (there is one path, migrated). */
	if (mask & IB_QP_AV) {
		u32 port = rdma_ah_get_port_num(&attr->ah_attr);

		if (port < 1 || port > dev->info.num_ports)
			return -EINVAL;
	}
	return 0;
}

static void fill_modify(struct ibemu_data_modify_qp *r, u32 qpn, u32 seq,
			const struct ib_qp_attr *attr, int mask)
{
	memset(r, 0, sizeof(*r));
	r->hdr.type = IBEMU_DATA_MODIFY_QP;
	r->hdr.length = sizeof(*r);
	r->qpn = qpn;
	/* Engine and kernel share the bits (checked at build time); the
	 * migration state has no value: there is one path, migrated. */
	r->attr_mask = mask & KQP_MODIFY_MASK;
	r->modify_seq = seq;
	if (mask & IB_QP_STATE)
		r->qp_state = attr->qp_state;
	if (mask & IB_QP_CUR_STATE)
		r->cur_qp_state = attr->cur_qp_state;
	if (mask & IB_QP_EN_SQD_ASYNC_NOTIFY)
		r->en_sqd_async_notify = attr->en_sqd_async_notify;
	if (mask & IB_QP_ACCESS_FLAGS)
		r->access_flags = attr->qp_access_flags &
				  (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC);
	if (mask & IB_QP_PKEY_INDEX)
		r->pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		r->port = attr->port_num;
	if (mask & IB_QP_QKEY)
		r->qkey = attr->qkey;
	if (mask & IB_QP_AV)
		fill_av_attr(&r->av, &attr->ah_attr);
	if (mask & IB_QP_PATH_MTU)
		r->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		r->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		r->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		r->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		r->rq_psn = attr->rq_psn;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		r->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		r->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		r->sq_psn = attr->sq_psn;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		r->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		r->dest_qpn = attr->dest_qp_num;
}

/* Keeps what a modify set (its record's fields that attr_mask names). */
static void save_attrs(struct ibemu_data_modify_qp *to,
		       const struct ibemu_data_modify_qp *from)
{
	u32 mask = from->attr_mask;

#define SAVE(bit, field)                      \
	do {                                  \
		if (mask & (bit))             \
			to->field = from->field; \
	} while (0)
	SAVE(IB_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
	SAVE(IB_QP_ACCESS_FLAGS, access_flags);
	SAVE(IB_QP_PKEY_INDEX, pkey_index);
	SAVE(IB_QP_PORT, port);
	SAVE(IB_QP_QKEY, qkey);
	SAVE(IB_QP_AV, av);
	SAVE(IB_QP_PATH_MTU, path_mtu);
	SAVE(IB_QP_TIMEOUT, timeout);
	SAVE(IB_QP_RETRY_CNT, retry_cnt);
	SAVE(IB_QP_RNR_RETRY, rnr_retry);
	SAVE(IB_QP_RQ_PSN, rq_psn);
	SAVE(IB_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	SAVE(IB_QP_MIN_RNR_TIMER, min_rnr_timer);
	SAVE(IB_QP_SQ_PSN, sq_psn);
	SAVE(IB_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	SAVE(IB_QP_DEST_QPN, dest_qpn);
#undef SAVE
	to->attr_mask |= mask & ~(IB_QP_STATE | IB_QP_CUR_STATE);
}

/* Empties the rings without completions (a move to RESET). */
static void reset_queues(struct ibemu_kqp *k)
{
	struct ibemu_wq *wqs[] = { &k->sq, &k->rq };
	int i;

	lockdep_assert_held(&k->lock);
	for (i = 0; i < ARRAY_SIZE(wqs); i++) {
		ibemu_data_producer_stop(&wqs[i]->prod);
		wqs[i]->head = wqs[i]->tail = 0;
		wqs[i]->prod.posted = wqs[i]->prod.delivered = 0;
	}
	k->gen++; /* completions of the old WQEs are stale */
}

/* Drops the QP's entries from its CQs, as mlx5 does for a kernel QP that
 * is reset or destroyed. */
static void purge_cqs(struct ibemu_kqp *k)
{
	ibemu_cq_purge_qp(k->send_cq, &k->qp->ibqp);
	if (k->recv_cq != k->send_cq)
		ibemu_cq_purge_qp(k->recv_cq, &k->qp->ibqp);
}

static bool channel_open(struct ibemu_dev *dev)
{
	return rcu_access_pointer(dev->chan) != NULL;
}

int ibemu_modify_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_dev *dev = k->dev;
	struct ibemu_data_modify_qp rec;
	enum ib_qp_state cur = IB_QPS_RESET, next = IB_QPS_RESET;
	bool sdue = false, rdue = false;
	int err;

	if (mask & ~KQP_MODIFY_MASK)
		return -EOPNOTSUPP;
	mutex_lock(&dev->obj_mutex);
	err = check_attr(dev, attr, mask, k->attrs.port);
	if (err)
		goto out;
	spin_lock_irq(&k->lock);
	cur = k->state;
	spin_unlock_irq(&k->lock);
	if ((mask & IB_QP_CUR_STATE) && attr->cur_qp_state != cur) {
		err = -EINVAL;
		goto out;
	}
	next = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask)) {
		err = -EINVAL;
		goto out;
	}
	fill_modify(&rec, ibqp->qp_num, k->modify_seq + 1, attr, mask);
	err = ibemu_data_queue_command(dev, &rec, sizeof(rec), GFP_KERNEL);
	if (err)
		goto out;

	spin_lock_irq(&k->lock);
	k->modify_seq++;
	save_attrs(&k->attrs, &rec);
	k->state = next;
	if (next == IB_QPS_RESET) {
		reset_queues(k);
		k->last_wqe = false;
	} else if (next == IB_QPS_ERR && !channel_open(dev)) {
		/* No engine to flush them: the module does (design 6.8). */
		sdue = complete_locally(k, &k->sq, IB_WC_WR_FLUSH_ERR);
		rdue = complete_locally(k, &k->rq, IB_WC_WR_FLUSH_ERR);
		last_wqe_reached(k, GFP_ATOMIC);
	}
	spin_unlock_irq(&k->lock);
out:
	mutex_unlock(&dev->obj_mutex);
	/* The completions of the WQEs a RESET discarded go with them. */
	if (!err && next == IB_QPS_RESET && cur != IB_QPS_RESET)
		purge_cqs(k);
	fire(k, sdue, rdue);
	return err;
}

int ibemu_query_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_qp_init_attr *init)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_data_modify_qp a;
	unsigned long flags;

	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	spin_lock_irqsave(&k->lock, flags);
	attr->qp_state = k->state;
	a = k->attrs;
	spin_unlock_irqrestore(&k->lock, flags);
	attr->cur_qp_state = attr->qp_state;
	attr->en_sqd_async_notify = a.en_sqd_async_notify;
	attr->qp_access_flags = a.access_flags;
	attr->pkey_index = a.pkey_index;
	attr->port_num = a.port;
	attr->qkey = a.qkey;
	if (a.attr_mask & IB_QP_AV)
		av_to_attr(&a.av, &attr->ah_attr);
	attr->path_mtu = a.path_mtu;
	attr->timeout = a.timeout;
	attr->retry_cnt = a.retry_cnt;
	attr->rnr_retry = a.rnr_retry;
	attr->rq_psn = a.rq_psn;
	attr->max_rd_atomic = a.max_rd_atomic;
	attr->min_rnr_timer = a.min_rnr_timer;
	attr->sq_psn = a.sq_psn;
	attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
	attr->dest_qp_num = a.dest_qpn;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->cap.max_send_wr = k->sq.max_wr;
	attr->cap.max_recv_wr = k->rq.max_wr;
	attr->cap.max_send_sge = k->sq.max_sge;
	attr->cap.max_recv_sge = k->rq.max_sge;
	attr->cap.max_inline_data = k->max_inline;
	init->qp_type = ibqp->qp_type;
	init->send_cq = &k->send_cq->ibcq;
	init->recv_cq = &k->recv_cq->ibcq;
	init->srq = k->srq ? &k->srq->ibsrq : NULL;
	init->cap = attr->cap;
	init->sq_sig_type = k->sq_sig_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	init->port_num = a.port;
	return 0;
}

/* Does not wait for the daemon: the engine's QP goes when DESTROY_QP is
 * read, and what the daemon still says of it is dropped. */
int ibemu_destroy_kqp(struct ib_qp *ibqp)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_dev *dev = k->dev;
	struct kqp_mcast *m, *next;

	mutex_lock(&dev->obj_mutex);
	idr_remove(&dev->qpns, ibqp->qp_num);
	list_del(&k->node);
	spin_lock_irq(&k->lock);
	ibemu_data_producer_stop(&k->sq.prod);
	ibemu_data_producer_stop(&k->rq.prod);
	spin_unlock_irq(&k->lock);
	ibemu_data_cmd_submit(dev, k->destroy_cmd);
	mutex_unlock(&dev->obj_mutex);
	/* No COMPLETE still holds it, and its events have run. */
	synchronize_rcu();
	flush_workqueue(dev->event_wq);
	/* wc.qp must not dangle (as HCAs clean a destroyed QP's CQEs). */
	purge_cqs(k);
	list_for_each_entry_safe(m, next, &k->mcast, node)
		kfree(m);
	wq_free(&k->sq);
	wq_free(&k->rq);
	to_qp(ibqp)->kqp = NULL;
	kfree(k);
	return 0;
}

/* ---- posting ---- */

#define KQP_SEND_FLAGS \
	(IB_SEND_FENCE | IB_SEND_SIGNALED | IB_SEND_SOLICITED | IB_SEND_INLINE)

/* What a send WR becomes in the engine. */
struct send_op {
	u8 opcode; /* enum ibemu_data_wr_opcode */
	u8 wc_opcode; /* enum ib_wc_opcode of its completion */
	u8 types; /* the QP types that carry it: BIT(IB_QPT_*) */
	u8 flags; /* SEND_OP_* */
};

#define SEND_OP_INLINE BIT(0) /* may carry its data inline */
#define SEND_OP_NO_DATA BIT(1) /* a local operation: no SGEs */
#define SEND_OP_ATOMIC BIT(2) /* 8 bytes of local memory at least */

#define ANY_QPT (BIT(IB_QPT_RC) | BIT(IB_QPT_UC) | BIT(IB_QPT_UD))
#define CONNECTED_QPT (BIT(IB_QPT_RC) | BIT(IB_QPT_UC))

/*
 * The operations of IBA table 84 the engine carries: UD sends only, UC no
 * RDMA READ, atomics or send with invalidate; fast registration on RC and
 * UC. The rest (LSO, RDMA_READ_WITH_INV, masked atomics, memory window
 * binds) is not offered, and refused at post time as an HCA that lacks it
 * does.
 */
static int send_op(enum ib_wr_opcode opcode, struct send_op *op)
{
	switch (opcode) {
	case IB_WR_SEND:
		*op = (struct send_op){ IBEMU_DATA_WR_SEND, IB_WC_SEND,
					ANY_QPT, SEND_OP_INLINE };
		break;
	case IB_WR_SEND_WITH_IMM:
		*op = (struct send_op){ IBEMU_DATA_WR_SEND_WITH_IMM, IB_WC_SEND,
					ANY_QPT, SEND_OP_INLINE };
		break;
	case IB_WR_SEND_WITH_INV:
		*op = (struct send_op){ IBEMU_DATA_WR_SEND_WITH_INV, IB_WC_SEND,
					BIT(IB_QPT_RC), SEND_OP_INLINE };
		break;
	case IB_WR_RDMA_WRITE:
		*op = (struct send_op){ IBEMU_DATA_WR_RDMA_WRITE,
					IB_WC_RDMA_WRITE, CONNECTED_QPT,
					SEND_OP_INLINE };
		break;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		*op = (struct send_op){ IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM,
					IB_WC_RDMA_WRITE, CONNECTED_QPT,
					SEND_OP_INLINE };
		break;
	case IB_WR_RDMA_READ:
		*op = (struct send_op){ IBEMU_DATA_WR_RDMA_READ,
					IB_WC_RDMA_READ, BIT(IB_QPT_RC), 0 };
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
		*op = (struct send_op){ IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP,
					IB_WC_COMP_SWAP, BIT(IB_QPT_RC),
					SEND_OP_ATOMIC };
		break;
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		*op = (struct send_op){ IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD,
					IB_WC_FETCH_ADD, BIT(IB_QPT_RC),
					SEND_OP_ATOMIC };
		break;
	case IB_WR_LOCAL_INV:
		*op = (struct send_op){ IBEMU_DATA_WR_LOCAL_INV,
					IB_WC_LOCAL_INV, CONNECTED_QPT,
					SEND_OP_NO_DATA };
		break;
	case IB_WR_REG_MR:
		*op = (struct send_op){ IBEMU_DATA_WR_REG_MR, IB_WC_REG_MR,
					CONNECTED_QPT, SEND_OP_NO_DATA };
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* The operands of the WR's own kind (ib_rdma_wr, ib_atomic_wr...). */
static void set_operands(struct ibemu_data_send_wqe *r,
			 const struct ib_send_wr *wr)
{
	switch (wr->opcode) {
	case IB_WR_SEND_WITH_IMM:
		r->imm_or_rkey = (__force u32)wr->ex.imm_data;
		break;
	case IB_WR_SEND_WITH_INV:
	case IB_WR_LOCAL_INV:
		r->imm_or_rkey = wr->ex.invalidate_rkey;
		break;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		r->imm_or_rkey = (__force u32)wr->ex.imm_data;
		fallthrough;
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_READ:
		r->remote_addr = rdma_wr(wr)->remote_addr;
		r->rkey = rdma_wr(wr)->rkey;
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		r->remote_addr = atomic_wr(wr)->remote_addr;
		r->rkey = atomic_wr(wr)->rkey;
		r->compare_add = atomic_wr(wr)->compare_add;
		r->swap = atomic_wr(wr)->swap;
		break;
	default:
		break;
	}
}

/* A UD send's destination: the AH's address vector, QPN and Q_Key. */
static void set_ud_dest(struct ibemu_data_send_wqe *r,
			const struct ib_ud_wr *ud)
{
	r->remote_qpn = ud->remote_qpn & 0xffffff;
	r->remote_qkey = ud->remote_qkey;
	fill_av(&r->av, to_ah(ud->ah));
}

void ibemu_copy_sges(struct ibemu_data_sge *to, const struct ib_sge *from,
		     int num_sge)
{
	int i;

	for (i = 0; i < num_sge; i++) {
		to[i].addr = from[i].addr;
		to[i].length = from[i].length;
		to[i].lkey = from[i].lkey;
	}
}

/* The bytes of a WR's SGEs; -EINVAL past a message's limit (2^31). */
static s64 sges_length(const struct ib_send_wr *wr)
{
	u64 total = 0;
	int i;

	for (i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	return total > (1u << 31) ? -EINVAL : total;
}

/* Builds a send WR's record in its slot; 0 or -EINVAL (post time checks
 * the engine would make too, so that the ULP gets them as an errno). */
static int build_send(struct ibemu_kqp *k, const struct ib_send_wr *wr,
		      u32 seq)
{
	struct ibemu_data_send_wqe *r = slot(&k->sq, seq);
	struct slot_meta *m = meta(&k->sq, seq);
	bool is_inline = wr->send_flags & IB_SEND_INLINE;
	bool ud = k->qp->ibqp.qp_type == IB_QPT_UD;
	int num_sge = wr->num_sge;
	unsigned int len;
	int i;
	struct send_op op;
	s64 total;

	if (send_op(wr->opcode, &op) || !(op.types & BIT(k->qp->ibqp.qp_type)))
		return -EINVAL;
	if ((wr->send_flags & ~KQP_SEND_FLAGS) || num_sge < 0)
		return -EINVAL;
	if (ud && !ud_wr(wr)->ah)
		return -EINVAL;
	if (op.flags & SEND_OP_NO_DATA)
		num_sge = 0; /* its sg_list means nothing */
	total = num_sge ? sges_length(wr) : 0;
	if (total < 0 || (is_inline && !(op.flags & SEND_OP_INLINE)))
		return -EINVAL;
	/* An atomic's original value lands in 8 bytes of local memory. */
	if ((op.flags & SEND_OP_ATOMIC) && total < 8)
		return -EINVAL;
	if (is_inline) {
		if (total > k->max_inline)
			return -EINVAL;
		len = ibemu_data_send_wqe_length(0, total);
	} else {
		if (num_sge > k->sq.max_sge)
			return -EINVAL;
		len = ibemu_data_send_wqe_length(num_sge, 0);
	}
	memset(r, 0, len);
	r->hdr.type = IBEMU_DATA_SEND_WQE;
	r->hdr.length = len;
	r->token = make_token(k, false, seq);
	r->qpn = k->qp->ibqp.qp_num;
	r->flags = wr->send_flags & KQP_SEND_FLAGS;
	r->opcode = op.opcode;
	set_operands(r, wr);
	/* Freezes the MR's page list (ibemu_mr.c): the last check. */
	if (wr->opcode == IB_WR_REG_MR &&
	    ibemu_mr_fill_reg_wr(k->dev, reg_wr(wr), &r->reg))
		return -EINVAL;
	if (ud)
		set_ud_dest(r, ud_wr(wr));
	if (is_inline) {
		/* SGE addresses are kernel virtual addresses (no DMA
		 * device), copied now: the WR's buffers are free on return. */
		total = 0;
		for (i = 0; i < num_sge; i++) {
			memcpy(r->inline_data + total,
			       (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			total += wr->sg_list[i].length;
		}
		r->inline_len = total;
	} else {
		r->num_sge = num_sge;
		ibemu_copy_sges(r->sge, wr->sg_list, num_sge);
	}
	m->wr_id = wr->wr_id;
	m->len = len;
	m->wc_opcode = op.wc_opcode;
	m->signaled = k->sq_sig_all || (wr->send_flags & IB_SEND_SIGNALED);
	return 0;
}

static bool send_state_ok(enum ib_qp_state s)
{
	return s == IB_QPS_RTS || s == IB_QPS_SQD || s == IB_QPS_SQE ||
	       s == IB_QPS_ERR;
}

static bool connected(const struct ibemu_kqp *k)
{
	return k->qp->ibqp.qp_type != IB_QPT_UD;
}

/*
 * The transport of an RC or UC QP is the engine's, and there is none (the
 * daemon is gone, or never came): the QP goes to ERR with QP_FATAL, and its
 * WQEs flush here (design 6.8). Under the QP's lock with the producers
 * idle; says which CQs' handlers are due.
 */
static void lose_transport(struct ibemu_kqp *k, gfp_t gfp, bool *sdue,
			   bool *rdue)
{
	lockdep_assert_held(&k->lock);
	if (k->state != IB_QPS_ERR && k->state != IB_QPS_RESET) {
		k->state = IB_QPS_ERR;
		queue_event(k, IB_EVENT_QP_FATAL, gfp);
	}
	if (k->state == IB_QPS_ERR)
		last_wqe_reached(k, gfp);
	*sdue |= complete_locally(k, &k->sq, IB_WC_WR_FLUSH_ERR);
	*rdue |= complete_locally(k, &k->rq, IB_WC_WR_FLUSH_ERR);
}

int ibemu_post_kqp_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_wq *sq = &k->sq;
	bool sdue = false, rdue = false;
	unsigned long flags;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&k->lock, flags);
	start = sq->head;
	for (; wr; wr = wr->next) {
		if (!send_state_ok(k->state)) {
			err = -EINVAL;
			break;
		}
		if (sq->head - sq->tail >= sq->max_wr) {
			err = -ENOMEM;
			break;
		}
		err = build_send(k, wr, sq->head);
		if (err)
			break;
		sq->head++;
	}
	/*
	 * With no daemon a datagram is lost on the way, as on an unplugged
	 * cable, and the send completes (design 6.8); in ERR it flushes. A
	 * connected QP has lost its transport.
	 */
	if (sq->head != start && !ibemu_data_ring_doorbell(&sq->prod, sq->head)) {
		if (connected(k))
			lose_transport(k, GFP_ATOMIC, &sdue, &rdue);
		else
			sdue = complete_locally(k, sq, k->state == IB_QPS_ERR ?
						       IB_WC_WR_FLUSH_ERR :
						       IB_WC_SUCCESS);
	}
	spin_unlock_irqrestore(&k->lock, flags);
	fire(k, sdue, rdue);
	if (err)
		*bad_wr = wr;
	return err;
}

int ibemu_post_kqp_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_wq *rq = &k->rq;
	bool sdue = false, rdue = false;
	unsigned long flags;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&k->lock, flags);
	start = rq->head;
	for (; wr; wr = wr->next) {
		struct ibemu_data_recv_wqe *r = slot(rq, rq->head);
		struct slot_meta *m = meta(rq, rq->head);
		unsigned int len;

		if (k->state == IB_QPS_RESET || k->srq || wr->num_sge < 0 ||
		    wr->num_sge > rq->max_sge) {
			err = -EINVAL;
			break;
		}
		if (rq->head - rq->tail >= rq->max_wr) {
			err = -ENOMEM;
			break;
		}
		len = ibemu_data_recv_wqe_length(wr->num_sge);
		memset(r, 0, len);
		r->hdr.type = IBEMU_DATA_RECV_WQE;
		r->hdr.length = len;
		r->token = make_token(k, true, rq->head);
		r->qpn = ibqp->qp_num;
		r->num_sge = wr->num_sge;
		ibemu_copy_sges(r->sge, wr->sg_list, wr->num_sge);
		m->wr_id = wr->wr_id;
		m->len = len;
		m->wc_opcode = IB_WC_RECV;
		m->signaled = true;
		rq->head++;
	}
	/* With no daemon a UD QP's receives wait for the next one (its
	 * replay), or flush in ERR; a connected QP has lost its transport. */
	if (rq->head != start && !ibemu_data_ring_doorbell(&rq->prod, rq->head)) {
		if (connected(k))
			lose_transport(k, GFP_ATOMIC, &sdue, &rdue);
		else if (k->state == IB_QPS_ERR)
			rdue = complete_locally(k, rq, IB_WC_WR_FLUSH_ERR);
	}
	spin_unlock_irqrestore(&k->lock, flags);
	fire(k, sdue, rdue);
	if (err)
		*bad_wr = wr;
	return err;
}

/* ---- multicast ---- */

static int mcast_cmd(struct ibemu_kqp *k, u16 type, const union ib_gid *gid,
		     u16 lid, struct ibemu_data_cmd **cmd)
{
	struct ibemu_data_mcast rec = {
		.hdr.type = type,
		.hdr.length = sizeof(rec),
		.qpn = k->qp->ibqp.qp_num,
		.mlid = lid,
	};

	memcpy(rec.mgid, gid->raw, sizeof(rec.mgid));
	if (cmd) {
		*cmd = ibemu_data_cmd_alloc(&rec, sizeof(rec), GFP_KERNEL);
		return PTR_ERR_OR_ZERO(*cmd);
	}
	return ibemu_data_queue_command(k->dev, &rec, sizeof(rec), GFP_KERNEL);
}

static struct kqp_mcast *find_mcast(struct ibemu_kqp *k,
				    const union ib_gid *gid, u16 lid)
{
	struct kqp_mcast *m;

	list_for_each_entry(m, &k->mcast, node)
		if (m->lid == lid && !memcmp(m->gid.raw, gid->raw, 16))
			return m;
	return NULL;
}

static int mcast_check(struct ib_qp *ibqp, const union ib_gid *gid, u16 lid)
{
	if (!to_qp(ibqp)->kqp || ibqp->qp_type != IB_QPT_UD)
		return -EOPNOTSUPP;
	if (lid < 0xc000 || lid > 0xfffe || gid->raw[0] != 0xff)
		return -EINVAL;
	return 0;
}

int ibemu_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct kqp_mcast *m;
	int err = mcast_check(ibqp, gid, lid);

	if (err)
		return err;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->gid = *gid;
	m->lid = lid;
	mutex_lock(&k->dev->obj_mutex);
	if (find_mcast(k, gid, lid))
		err = -EEXIST;
	else
		err = mcast_cmd(k, IBEMU_DATA_MCAST_ATTACH, gid, lid, NULL);
	if (!err)
		list_add_tail(&m->node, &k->mcast);
	mutex_unlock(&k->dev->obj_mutex);
	if (err)
		kfree(m);
	return err;
}

int ibemu_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct kqp_mcast *m;
	int err = mcast_check(ibqp, gid, lid);

	if (err)
		return err;
	mutex_lock(&k->dev->obj_mutex);
	m = find_mcast(k, gid, lid);
	if (!m)
		err = -ENOENT;
	else
		err = mcast_cmd(k, IBEMU_DATA_MCAST_DETACH, gid, lid, NULL);
	if (!err)
		list_del(&m->node);
	mutex_unlock(&k->dev->obj_mutex);
	if (!err)
		kfree(m);
	return err;
}

/* ---- what the daemon hands back ---- */

static u8 recv_wc_opcode(u8 opcode)
{
	return opcode == IBEMU_DATA_WC_RECV_RDMA_WITH_IMM ?
		       IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV;
}

/* The WQE a CQE names, retired with the unsignaled ones before it; its
 * wr_id (and for a send the opcode) into `wc`. Under the QP's lock. */
static bool retire_wqe(struct ibemu_kqp *k, const struct ibemu_data_cqe *c,
		       bool recv, struct ib_wc *wc)
{
	u32 gen = c->token >> 33, seq = (u32)c->token;
	struct ibemu_wq *wq = recv ? &k->rq : &k->sq;
	struct ibemu_cq *cq = recv ? k->recv_cq : k->send_cq;
	struct slot_meta *m;

	lockdep_assert_held(&k->lock);
	if (cq->handle != c->cq)
		return false;
	/* A receive of an SRQ names the SRQ's WQE (ibemu_srq.c). */
	if (recv && k->srq)
		return ibemu_srq_retire(k->srq, c->token, &wc->wr_id);
	/* Only a WQE the engine got: outstanding and delivered. */
	if (gen != (k->gen & TOKEN_GEN_MASK) ||
	    seq - wq->tail >= wq->head - wq->tail ||
	    seq - wq->tail >= READ_ONCE(wq->prod.delivered) - wq->tail)
		return false;
	m = meta(wq, seq);
	wc->wr_id = m->wr_id;
	if (!recv)
		wc->opcode = m->wc_opcode;
	/* It and the unsignaled sends before it are done. */
	wq->tail = seq + 1;
	return true;
}

void ibemu_kqp_cqe(struct ibemu_dev *dev, const struct ibemu_data_cqe *c,
		   struct list_head *fire)
{
	bool recv = (c->token >> 32) & 1;
	struct ibemu_kqp *k = idr_find(&dev->qpns, c->qpn);
	struct ibemu_cq *cq;
	unsigned long flags;
	struct ib_wc wc;
	bool due;

	if (!k)
		goto drop;
	cq = recv ? k->recv_cq : k->send_cq;
	memset(&wc, 0, sizeof(wc));
	if (recv)
		wc.opcode = recv_wc_opcode(c->opcode);
	spin_lock_irqsave(&k->lock, flags);
	if (!retire_wqe(k, c, recv, &wc)) {
		spin_unlock_irqrestore(&k->lock, flags);
		goto drop;
	}
	wc.status = c->status;
	wc.vendor_err = c->vendor_err;
	wc.byte_len = c->byte_len;
	wc.qp = &k->qp->ibqp;
	if (c->flags & IBEMU_DATA_WC_WITH_IMM) {
		wc.wc_flags |= IB_WC_WITH_IMM;
		wc.ex.imm_data = (__force __be32)c->imm_or_rkey;
	} else if (c->flags & IBEMU_DATA_WC_WITH_INV) {
		wc.wc_flags |= IB_WC_WITH_INVALIDATE;
		wc.ex.invalidate_rkey = c->imm_or_rkey;
	}
	if (c->flags & IBEMU_DATA_WC_GRH)
		wc.wc_flags |= IB_WC_GRH;
	wc.src_qp = c->src_qp;
	wc.pkey_index = c->pkey_index;
	wc.slid = c->slid;
	wc.sl = c->sl;
	wc.dlid_path_bits = c->dlid_path_bits;
	wc.port_num = k->attrs.port;
	due = ibemu_cq_add_solicited(cq, &wc, c->solicited);
	spin_unlock_irqrestore(&k->lock, flags);
	if (due && !cq->fire) {
		cq->fire = true;
		list_add_tail(&cq->fire_node, fire);
	}
	return;
drop:
	atomic_inc(&dev->dropped_records);
}

static void event_work(struct work_struct *work)
{
	struct kqp_event_work *w = container_of(work, struct kqp_event_work,
						work);
	struct ib_qp *ibqp = &w->k->qp->ibqp;
	struct ib_event ev = {
		.device = ibqp->device,
		.element.qp = ibqp,
		.event = w->event,
	};

	if (ibqp->event_handler)
		ibqp->event_handler(&ev, ibqp->qp_context);
	kfree(w);
}

/* The QP's handler runs on the device's ordered workqueue, never in the
 * caller's context (design 6.2); false when out of memory. */
static bool queue_event(struct ibemu_kqp *k, enum ib_event_type event,
			gfp_t gfp)
{
	struct kqp_event_work *w = kmalloc(sizeof(*w), gfp);

	if (!w)
		return false;
	INIT_WORK(&w->work, event_work);
	w->k = k;
	w->event = event;
	queue_work(k->dev->event_wq, &w->work);
	return true;
}

void ibemu_kqp_event(struct ibemu_dev *dev, const struct ibemu_data_event *e)
{
	struct ibemu_kqp *k;
	unsigned long flags;

	if (e->object == IBEMU_DATA_EVENT_ON_SRQ) {
		ibemu_srq_event(dev, e);
		return;
	}
	/* The engine's CQs raise no events (an overrun is the module's). */
	if (e->object != IBEMU_DATA_EVENT_ON_QP)
		goto drop;
	k = idr_find(&dev->qpns, e->handle);
	if (!k)
		goto drop;
	spin_lock_irqsave(&k->lock, flags);
	/* A state the ULP has not changed since (else the engine's news
	 * is older than the ULP's modify, which wins). */
	if (e->modify_seq == k->modify_seq && k->state != IB_QPS_RESET)
		k->state = e->qp_state;
	if (e->event == IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED) {
		/* Once per entry into ERR: not for one the ULP has left
		 * since, nor again for one the module reported itself. */
		bool stale = k->last_wqe || e->modify_seq != k->modify_seq;

		k->last_wqe = true;
		spin_unlock_irqrestore(&k->lock, flags);
		if (stale || !queue_event(k, e->event, GFP_ATOMIC))
			goto drop;
		return;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	if (e->event == IBEMU_DATA_EVENT_QP_STATE ||
	    queue_event(k, e->event, GFP_ATOMIC))
		return;
drop:
	atomic_inc(&dev->dropped_records);
}

/* ---- daemon loss and replay (design 6.8) ---- */

void ibemu_kqp_channel_lost(struct ibemu_dev *dev)
{
	struct ibemu_kqp *k;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(k, &dev->kqps, node) {
		bool sdue = false, rdue = false;

		spin_lock_irq(&k->lock);
		if (connected(k)) {
			/* Its connection died with the engine. */
			lose_transport(k, GFP_ATOMIC, &sdue, &rdue);
		} else if (k->state == IB_QPS_ERR) {
			/* The engine that would have flushed them is gone. */
			sdue = complete_locally(k, &k->sq, IB_WC_WR_FLUSH_ERR);
			rdue = complete_locally(k, &k->rq, IB_WC_WR_FLUSH_ERR);
		} else {
			/* Datagrams lost on a dead link; receives stay
			 * posted for the next daemon. */
			sdue = complete_locally(k, &k->sq, IB_WC_SUCCESS);
		}
		spin_unlock_irq(&k->lock);
		fire(k, sdue, rdue);
	}
}

static void submit(struct ibemu_dev *dev, const void *rec, size_t len)
{
	struct ibemu_data_cmd *cmd = ibemu_data_cmd_alloc(rec, len, GFP_KERNEL);

	if (IS_ERR(cmd)) {
		ibdev_err(&dev->ibdev, "a kernel QP was not replayed: out of memory\n");
		return;
	}
	ibemu_data_cmd_submit(dev, cmd);
}

/* One step of the drive from RESET to the saved state. */
static void replay_modify(struct ibemu_kqp *k, enum ib_qp_state state,
			  int mask)
{
	struct ibemu_data_modify_qp rec;

	spin_lock_irq(&k->lock);
	rec = k->attrs;
	rec.modify_seq = ++k->modify_seq;
	spin_unlock_irq(&k->lock);
	memset(&rec.hdr, 0, sizeof(rec.hdr));
	rec.hdr.type = IBEMU_DATA_MODIFY_QP;
	rec.hdr.length = sizeof(rec);
	rec.qpn = k->qp->ibqp.qp_num;
	rec.attr_mask = mask | IB_QP_STATE;
	rec.qp_state = state;
	rec.cur_qp_state = 0;
	submit(k->dev, &rec, sizeof(rec));
}

/* A UD QP is driven to its state again. An SQE QP is driven to RTS (there
 * is no modify into SQE); its shadow says SQE until the ULP recovers it. */
static void replay_ud(struct ibemu_kqp *k, enum ib_qp_state state)
{
	struct kqp_mcast *m;

	if (state == IB_QPS_ERR) {
		replay_modify(k, IB_QPS_ERR, 0);
	} else if (state != IB_QPS_RESET) {
		replay_modify(k, IB_QPS_INIT,
			      IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY);
		if (state != IB_QPS_INIT)
			replay_modify(k, IB_QPS_RTR, 0);
		if (state != IB_QPS_INIT && state != IB_QPS_RTR)
			replay_modify(k, IB_QPS_RTS, IB_QP_SQ_PSN);
		if (state == IB_QPS_SQD)
			replay_modify(k, IB_QPS_SQD, 0);
	}
	list_for_each_entry(m, &k->mcast, node) {
		struct ibemu_data_cmd *cmd;

		if (!mcast_cmd(k, IBEMU_DATA_MCAST_ATTACH, &m->gid, m->lid,
			       &cmd))
			ibemu_data_cmd_submit(k->dev, cmd);
	}
}

/*
 * A connected QP's connection does not survive its engine: outside RESET
 * it is in ERR already (ibemu_kqp_channel_lost()), or it was driven on with
 * no daemon and goes there now, with QP_FATAL. Its engine copy follows.
 */
static void replay_connected(struct ibemu_kqp *k, enum ib_qp_state state)
{
	if (state == IB_QPS_RESET)
		return;
	if (state != IB_QPS_ERR) {
		spin_lock_irq(&k->lock);
		k->state = IB_QPS_ERR;
		spin_unlock_irq(&k->lock);
		queue_event(k, IB_EVENT_QP_FATAL, GFP_KERNEL);
	}
	replay_modify(k, IB_QPS_ERR, 0);
}

/*
 * The QPs of a device for a new channel, under obj_mutex while the channel
 * delivers no WQE (ibemu_data.c): each is created, UD QPs driven from RESET
 * to their state with their saved attributes and attached to their groups,
 * RC and UC ones left in RESET or moved to ERR; then the posted receives go
 * again.
 */
void ibemu_kqp_replay(struct ibemu_dev *dev)
{
	struct ibemu_kqp *k;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(k, &dev->kqps, node) {
		struct ibemu_data_create_qp create;
		enum ib_qp_state state;

		fill_create(k, k->qp->ibqp.qp_num, &create);
		submit(dev, &create, sizeof(create));
		spin_lock_irq(&k->lock);
		state = k->state;
		spin_unlock_irq(&k->lock);
		if (connected(k))
			replay_connected(k, state);
		else
			replay_ud(k, state);
		/* The receives the last engine held, and those posted since:
		 * all outstanding ones, again, after the commands. */
		spin_lock_irq(&k->lock);
		ibemu_data_producer_stop(&k->rq.prod);
		k->rq.prod.posted = k->rq.prod.delivered = k->rq.tail;
		if (k->rq.head != k->rq.tail && state != IB_QPS_RESET)
			ibemu_data_ring_doorbell(&k->rq.prod, k->rq.head);
		spin_unlock_irq(&k->lock);
	}
}
