// SPDX-License-Identifier: GPL-2.0
/*
 * ibemu_kverbs_test: a kernel consumer of an ibemu device for the qemu test
 * (never installed). Like a ULP it registers an ib_client, and on the device
 * it is told to use (module parameter `device`, default ibemu0) it creates a
 * PD with an unsafe global rkey (as SRP and iSER do), a CQ polled from a
 * workqueue, an RC QP (a UC one, or an RC one on an SRQ, on command), a
 * kernel buffer mapped with ib_dma_map_single and, on command, a fast
 * registration MR over part of it.
 * A verbs program on the other end (tests/programs/kverbs_peer.c) drives it
 * through /sys/kernel/debug/ibemu_kverbs/ctl:
 *
 *   read:  qpn, type, lid, gid, psn, addr, rkey, size, state, the FRWR
 *          MR's rkey and iova (0 until registered), the SRQ's limit (with
 *          an SRQ), the async events seen since the last connect (the
 *          QP's and the SRQ's), and the result of the last command
 *   write one command:
 *     type rc|uc|srq            a new QP of that type in place of the last
 *                               (srq: an RC QP receiving through an SRQ)
 *     connect QPN LID PSN       RESET -> INIT -> RTR -> RTS toward the peer
 *     recv OFF LEN              post a receive into the buffer
 *     srecv OFF LEN             post a receive on the SRQ
 *     limit N                   arm the SRQ's limit (ib_modify_srq)
 *     send OFF LEN [IMM]        post a SEND (with immediate data)
 *     write OFF LEN RADDR RKEY  post an RDMA WRITE from the buffer
 *     read OFF LEN RADDR RKEY   post an RDMA READ into the buffer
 *     fadd OFF RADDR RKEY ADD   post a fetch and add (original value at OFF)
 *     cswap OFF RADDR RKEY CMP SWAP
 *     poll N MSECS              wait for N completions, list them
 *     fill OFF LEN SEED         a pattern in the buffer; check compares it
 *     check OFF LEN SEED
 *     word OFF                  the 64-bit word at OFF
 *     drain                     ib_drain_qp()
 *     frwr OFF LEN              map the buffer's bytes into the FRWR MR
 *                               (allocated at the first), give it the next
 *                               key and post IB_WR_REG_MR (local write,
 *                               remote read and write)
 *     inv                       post IB_WR_LOCAL_INV of the FRWR MR's key
 *
 * Every WR is signaled; a completion is listed as
 * "wc OP status N (text) len BYTES opcode N [imm 0xX] [inv 0xX]". Numbers
 * may be decimal or 0x-prefixed.
 */
#include <linux/debugfs.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

static char *device = "ibemu0";
module_param(device, charp, 0444);
MODULE_PARM_DESC(device, "the RDMA device to use (default ibemu0)");

static unsigned int buf_size = 65536;
module_param(buf_size, uint, 0444);
MODULE_PARM_DESC(buf_size, "bytes of the kernel buffer (default 65536)");

#define PORT 1
#define QUEUE_DEPTH 64
#define SRQ_DEPTH 16
#define CQ_DEPTH (2 * QUEUE_DEPTH + 2) /* both queues, and a drain each */
#define SLOTS 128 /* WR contexts, reused in turn (more than can be posted) */
#define MAX_WCS 256
#define RESULT_SIZE 4096
#define WORDS 8 /* of a command */
#define FRWR_PAGES 16 /* the FRWR MR's page list */

struct wr_slot {
	struct ib_cqe cqe;
	const char *what;
};

struct done_wc {
	const char *what;
	enum ib_wc_status status;
	enum ib_wc_opcode opcode;
	u32 byte_len;
	bool with_imm;
	u32 imm;
	bool with_inv; /* a SEND with Invalidate took this rkey back */
	u32 inv_rkey;
};

struct kverbs {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct ib_mr *frwr; /* allocated by the first "frwr" */
	struct ib_srq *srq; /* made by the first `type srq` */
	void *buf;
	u64 dma;
	u32 psn;
	struct wr_slot slots[SLOTS];
	unsigned int next_slot;

	spinlock_t lock; /* the completions and events below */
	struct done_wc wcs[MAX_WCS];
	unsigned int wc_head, wc_count, wc_lost;
	char events[256];
	wait_queue_head_t wait;

	struct mutex cmd_mutex; /* one command at a time, and result */
	char *result;
};

static struct kverbs *kv; /* the one device in use, under kv_mutex */
static DEFINE_MUTEX(kv_mutex);
static struct dentry *debug_dir;

/* ---- completions and events ---- */

static void wr_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct kverbs *k = cq->cq_context;
	struct wr_slot *s = container_of(wc->wr_cqe, struct wr_slot, cqe);
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (k->wc_count == MAX_WCS) {
		k->wc_lost++;
	} else {
		struct done_wc *d =
			&k->wcs[(k->wc_head + k->wc_count++) % MAX_WCS];

		d->what = s->what;
		d->status = wc->status;
		d->opcode = wc->opcode;
		d->byte_len = wc->byte_len;
		d->with_imm = wc->status == IB_WC_SUCCESS &&
			      (wc->wc_flags & IB_WC_WITH_IMM);
		d->imm = d->with_imm ? be32_to_cpu(wc->ex.imm_data) : 0;
		d->with_inv = wc->status == IB_WC_SUCCESS &&
			      (wc->wc_flags & IB_WC_WITH_INVALIDATE);
		d->inv_rkey = d->with_inv ? wc->ex.invalidate_rkey : 0;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	wake_up(&k->wait);
}

static void qp_event(struct ib_event *ev, void *context)
{
	struct kverbs *k = context;
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (strlen(k->events) + 40 < sizeof(k->events))
		snprintf(k->events + strlen(k->events),
			 sizeof(k->events) - strlen(k->events), "%s%s",
			 k->events[0] ? "," : "", ib_event_msg(ev->event));
	spin_unlock_irqrestore(&k->lock, flags);
}

static void srq_event(struct ib_event *ev, void *context)
{
	qp_event(ev, context);
}

/* ---- setting up on the device ---- */

/* What a ULP does before it destroys a QP that was used (design 6.7): a
 * QP in RESET cannot go to ERR, and ib_drain_qp() would warn. */
static void destroy_qp(struct ib_qp *qp)
{
	struct ib_qp_init_attr init;
	struct ib_qp_attr attr;

	if (ib_query_qp(qp, &attr, IB_QP_STATE, &init) ||
	    attr.qp_state != IB_QPS_RESET)
		ib_drain_qp(qp);
	ib_destroy_qp(qp);
}

/* A QP of `type` (RC or UC) on the PD and CQ, in RESET; receiving
 * through `srq` when there is one. */
static struct ib_qp *create_qp(struct kverbs *k, enum ib_qp_type type,
			       struct ib_srq *srq)
{
	struct ib_qp_init_attr init = {
		.qp_type = type,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = {
			.max_send_wr = QUEUE_DEPTH,
			.max_recv_wr = QUEUE_DEPTH,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.event_handler = qp_event,
		.qp_context = k,
		.send_cq = k->cq,
		.recv_cq = k->cq,
		.srq = srq,
	};

	return ib_create_qp(k->pd, &init);
}

static int make_srq(struct kverbs *k)
{
	struct ib_srq_init_attr init = {
		.event_handler = srq_event,
		.srq_context = k,
		.srq_type = IB_SRQT_BASIC,
		.attr = { .max_wr = SRQ_DEPTH, .max_sge = 1 },
	};
	struct ib_srq *srq;

	if (k->srq)
		return 0;
	srq = ib_create_srq(k->pd, &init);
	if (IS_ERR(srq))
		return PTR_ERR(srq);
	k->srq = srq;
	return 0;
}

static void kverbs_free(struct kverbs *k)
{
	if (k->qp)
		destroy_qp(k->qp);
	if (k->frwr)
		ib_dereg_mr(k->frwr);
	if (k->srq)
		ib_destroy_srq(k->srq);
	if (k->cq)
		ib_free_cq(k->cq);
	if (k->dma)
		ib_dma_unmap_single(k->dev, k->dma, buf_size,
				    DMA_BIDIRECTIONAL);
	if (k->pd)
		ib_dealloc_pd(k->pd);
	kfree(k->buf);
	kfree(k->result);
	kfree(k);
}

static struct kverbs *kverbs_create(struct ib_device *dev)
{
	struct kverbs *k = kzalloc(sizeof(*k), GFP_KERNEL);
	int err = -ENOMEM;

	if (!k)
		return ERR_PTR(-ENOMEM);
	k->dev = dev;
	spin_lock_init(&k->lock);
	init_waitqueue_head(&k->wait);
	mutex_init(&k->cmd_mutex);
	k->psn = get_random_u32() & 0xffffff;
	k->buf = kzalloc(buf_size, GFP_KERNEL);
	k->result = kzalloc(RESULT_SIZE, GFP_KERNEL);
	if (!k->buf || !k->result)
		goto fail;
	k->pd = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(k->pd)) {
		err = PTR_ERR(k->pd);
		k->pd = NULL;
		goto fail;
	}
	k->dma = ib_dma_map_single(dev, k->buf, buf_size, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, k->dma)) {
		k->dma = 0;
		err = -EIO;
		goto fail;
	}
	k->cq = ib_alloc_cq(dev, k, CQ_DEPTH, 0, IB_POLL_WORKQUEUE);
	if (IS_ERR(k->cq)) {
		err = PTR_ERR(k->cq);
		k->cq = NULL;
		goto fail;
	}
	k->qp = create_qp(k, IB_QPT_RC, NULL);
	if (IS_ERR(k->qp)) {
		err = PTR_ERR(k->qp);
		k->qp = NULL;
		goto fail;
	}
	return k;
fail:
	kverbs_free(k);
	return ERR_PTR(err);
}

static struct ib_client kverbs_client;

static int kverbs_add(struct ib_device *dev)
{
	struct kverbs *k;

	if (strcmp(dev_name(&dev->dev), device))
		return -EOPNOTSUPP; /* not ours: no client data */
	k = kverbs_create(dev);
	if (IS_ERR(k)) {
		pr_err("ibemu_kverbs_test: %s: %ld\n", device, PTR_ERR(k));
		return PTR_ERR(k);
	}
	mutex_lock(&kv_mutex);
	kv = k;
	mutex_unlock(&kv_mutex);
	ib_set_client_data(dev, &kverbs_client, k);
	return 0;
}

static void kverbs_remove(struct ib_device *dev, void *data)
{
	struct kverbs *k = data;

	mutex_lock(&kv_mutex);
	if (kv == k)
		kv = NULL;
	mutex_unlock(&kv_mutex);
	/* A command in progress has ended: it holds kv_mutex. */
	kverbs_free(k);
}

static struct ib_client kverbs_client = {
	.name = "ibemu_kverbs_test",
	.add = kverbs_add,
	.remove = kverbs_remove,
};

/* ---- commands ---- */

static struct wr_slot *next_slot(struct kverbs *k, const char *what)
{
	struct wr_slot *s = &k->slots[k->next_slot++ % SLOTS];

	s->cqe.done = wr_done;
	s->what = what;
	return s;
}

static bool in_buf(u64 off, u64 len)
{
	return off <= buf_size && len <= buf_size - off;
}

static struct ib_sge buf_sge(struct kverbs *k, u64 off, u64 len)
{
	return (struct ib_sge){
		.addr = k->dma + off,
		.length = len,
		.lkey = k->pd->local_dma_lkey,
	};
}

static int kverbs_connect(struct kverbs *k, u32 qpn, u32 lid, u32 psn)
{
	struct ib_port_attr port;
	struct ib_qp_attr a = { .qp_state = IB_QPS_RESET };
	bool rc = k->qp->qp_type == IB_QPT_RC;
	unsigned long flags;
	int err;

	err = ib_query_port(k->dev, PORT, &port);
	if (!err)
		err = ib_modify_qp(k->qp, &a, IB_QP_STATE);
	if (err)
		return err;
	/* What the last connection's WQEs and events said is of no interest
	 * now. */
	spin_lock_irqsave(&k->lock, flags);
	k->wc_count = 0;
	k->events[0] = 0;
	spin_unlock_irqrestore(&k->lock, flags);
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_INIT;
	a.port_num = PORT;
	a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			    IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC;
	err = ib_modify_qp(k->qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX |
				      IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = min_t(enum ib_mtu, port.active_mtu, IB_MTU_1024);
	a.dest_qp_num = qpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.type = RDMA_AH_ATTR_TYPE_IB;
	rdma_ah_set_dlid(&a.ah_attr, lid);
	rdma_ah_set_port_num(&a.ah_attr, PORT);
	/* UC has no responder resources, RNR NAKs or retries. */
	err = ib_modify_qp(k->qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
				      IB_QP_DEST_QPN | IB_QP_RQ_PSN |
				      (rc ? IB_QP_MAX_DEST_RD_ATOMIC |
						    IB_QP_MIN_RNR_TIMER : 0));
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = k->psn;
	a.max_rd_atomic = 4;
	return ib_modify_qp(k->qp, &a, IB_QP_STATE | IB_QP_SQ_PSN |
				       (rc ? IB_QP_TIMEOUT | IB_QP_RETRY_CNT |
						     IB_QP_RNR_RETRY |
						     IB_QP_MAX_QP_RD_ATOMIC : 0));
}

/* A new QP of another type in place of the one there is. */
static int kverbs_retype(struct kverbs *k, const char *name)
{
	enum ib_qp_type type = IB_QPT_RC;
	struct ib_srq *srq = NULL;
	struct ib_qp *qp;
	int err;

	if (!strcmp(name, "uc")) {
		type = IB_QPT_UC;
	} else if (!strcmp(name, "srq")) {
		err = make_srq(k);
		if (err)
			return err;
		srq = k->srq;
	} else if (strcmp(name, "rc")) {
		return -EINVAL;
	}
	qp = create_qp(k, type, srq);
	if (IS_ERR(qp))
		return PTR_ERR(qp);
	destroy_qp(k->qp);
	k->qp = qp;
	return 0;
}

/* A receive into the buffer, on the QP's own queue or on the SRQ. */
static int post_recv(struct kverbs *k, u64 off, u64 len, bool on_srq)
{
	struct ib_sge sge = buf_sge(k, off, len);
	struct ib_recv_wr wr = {
		.wr_cqe = &next_slot(k, "RECV")->cqe,
		.sg_list = &sge,
		.num_sge = 1,
	};

	if (!on_srq)
		return ib_post_recv(k->qp, &wr, NULL);
	return k->srq ? ib_post_srq_recv(k->srq, &wr, NULL) : -EINVAL;
}

static int arm_srq_limit(struct kverbs *k, u64 limit)
{
	struct ib_srq_attr attr = { .srq_limit = limit };

	return k->srq ? ib_modify_srq(k->srq, &attr, IB_SRQ_LIMIT) : -EINVAL;
}

/* A signaled send WR of one SGE of the buffer. */
static int post_send(struct kverbs *k, struct ib_send_wr *wr, const char *what,
		     u64 off, u64 len)
{
	struct ib_sge sge = buf_sge(k, off, len);

	wr->wr_cqe = &next_slot(k, what)->cqe;
	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags = IB_SEND_SIGNALED;
	return ib_post_send(k->qp, wr, NULL);
}

/* SEND, RDMA WRITE or READ. */
static int post_data(struct kverbs *k, enum ib_wr_opcode opcode,
		     const char *what, u64 off, u64 len, u64 raddr, u32 rkey,
		     u32 imm)
{
	struct ib_rdma_wr wr = {
		.wr.opcode = opcode,
		.wr.ex.imm_data = cpu_to_be32(imm),
		.remote_addr = raddr,
		.rkey = rkey,
	};

	return post_send(k, &wr.wr, what, off, len);
}

static int post_atomic(struct kverbs *k, enum ib_wr_opcode opcode,
		       const char *what, u64 off, u64 raddr, u32 rkey,
		       u64 compare_add, u64 swap)
{
	struct ib_atomic_wr wr = {
		.wr.opcode = opcode,
		.remote_addr = raddr,
		.rkey = rkey,
		.compare_add = compare_add,
		.swap = swap,
	};

	return post_send(k, &wr.wr, what, off, 8);
}

/*
 * Fast registration as a storage ULP does it: the buffer's bytes (mapped
 * already) as a scatterlist, ib_map_mr_sg, the next key, IB_WR_REG_MR.
 */
static int post_reg_mr(struct kverbs *k, u64 off, u64 len)
{
	struct ib_reg_wr wr = {
		.wr.opcode = IB_WR_REG_MR,
		.wr.send_flags = IB_SEND_SIGNALED,
		.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			  IB_ACCESS_REMOTE_READ,
	};
	struct scatterlist sg;
	int mapped;

	if (!k->frwr) {
		k->frwr = ib_alloc_mr(k->pd, IB_MR_TYPE_MEM_REG, FRWR_PAGES);
		if (IS_ERR(k->frwr)) {
			int err = PTR_ERR(k->frwr);

			k->frwr = NULL;
			return err;
		}
	}
	sg_init_table(&sg, 1);
	sg_set_buf(&sg, k->buf + off, len);
	sg_dma_address(&sg) = k->dma + off;
	sg_dma_len(&sg) = len;
	mapped = ib_map_mr_sg(k->frwr, &sg, 1, NULL, PAGE_SIZE);
	if (mapped != 1)
		return mapped < 0 ? mapped : -EINVAL;
	ib_update_fast_reg_key(k->frwr, ib_inc_rkey(k->frwr->rkey));
	wr.wr.wr_cqe = &next_slot(k, "REG_MR")->cqe;
	wr.mr = k->frwr;
	wr.key = k->frwr->rkey;
	return ib_post_send(k->qp, &wr.wr, NULL);
}

static int post_local_inv(struct kverbs *k)
{
	struct ib_send_wr wr = {
		.opcode = IB_WR_LOCAL_INV,
		.send_flags = IB_SEND_SIGNALED,
	};

	if (!k->frwr)
		return -EINVAL;
	wr.wr_cqe = &next_slot(k, "LOCAL_INV")->cqe;
	wr.ex.invalidate_rkey = k->frwr->rkey;
	return ib_post_send(k->qp, &wr, NULL);
}

static u8 pattern(u64 seed, u64 i)
{
	return (u8)(seed + i * 7 + (i >> 8));
}

static int cmd_check(struct kverbs *k, u64 off, u64 len, u64 seed,
		     char *out, size_t room)
{
	const u8 *b = k->buf + off;
	u64 i;

	for (i = 0; i < len; i++) {
		if (b[i] != pattern(seed, i)) {
			snprintf(out, room, "mismatch at %llu: 0x%02x, not 0x%02x\n",
				 i, b[i], pattern(seed, i));
			return 0;
		}
	}
	snprintf(out, room, "ok\n");
	return 0;
}

/* Waits for `n` completions, `msecs` at most, and lists them. */
static int cmd_poll(struct kverbs *k, u64 n, u64 msecs, char *out,
		    size_t room)
{
	size_t used = 0;
	unsigned long flags;
	long left;

	n = min_t(u64, n, MAX_WCS);
	left = wait_event_interruptible_timeout(k->wait,
		READ_ONCE(k->wc_count) >= n, msecs_to_jiffies(msecs));
	if (left < 0)
		return left;
	spin_lock_irqsave(&k->lock, flags);
	for (; n && k->wc_count; n--, k->wc_count--) {
		const struct done_wc *d = &k->wcs[k->wc_head];

		k->wc_head = (k->wc_head + 1) % MAX_WCS;
		used += scnprintf(out + used, room - used,
				  "wc %s status %d (%s) len %u opcode %d",
				  d->what, d->status,
				  ib_wc_status_msg(d->status), d->byte_len,
				  d->opcode);
		if (d->with_imm)
			used += scnprintf(out + used, room - used,
					  " imm 0x%x", d->imm);
		if (d->with_inv)
			used += scnprintf(out + used, room - used,
					  " inv 0x%x", d->inv_rkey);
		used += scnprintf(out + used, room - used, "\n");
	}
	if (n)
		used += scnprintf(out + used, room - used,
				  "timeout: %llu more not completed\n", n);
	if (k->wc_lost)
		scnprintf(out + used, room - used, "lost %u\n", k->wc_lost);
	spin_unlock_irqrestore(&k->lock, flags);
	return 0;
}

/* The posting commands: OP OFF LEN ... */
static int cmd_post(struct kverbs *k, const char *op, const u64 *v, int n)
{
	if (!strcmp(op, "recv") && n == 2 && in_buf(v[0], v[1]))
		return post_recv(k, v[0], v[1], false);
	if (!strcmp(op, "srecv") && n == 2 && in_buf(v[0], v[1]))
		return post_recv(k, v[0], v[1], true);
	if (!strcmp(op, "send") && (n == 2 || n == 3) && in_buf(v[0], v[1]))
		return post_data(k, n == 3 ? IB_WR_SEND_WITH_IMM : IB_WR_SEND,
				 "SEND", v[0], v[1], 0, 0, n == 3 ? v[2] : 0);
	if (!strcmp(op, "write") && n == 4 && in_buf(v[0], v[1]))
		return post_data(k, IB_WR_RDMA_WRITE, "RDMA_WRITE", v[0], v[1],
				 v[2], v[3], 0);
	if (!strcmp(op, "read") && n == 4 && in_buf(v[0], v[1]))
		return post_data(k, IB_WR_RDMA_READ, "RDMA_READ", v[0], v[1],
				 v[2], v[3], 0);
	if (!strcmp(op, "fadd") && n == 4 && in_buf(v[0], 8))
		return post_atomic(k, IB_WR_ATOMIC_FETCH_AND_ADD, "FETCH_ADD",
				   v[0], v[1], v[2], v[3], 0);
	if (!strcmp(op, "cswap") && n == 5 && in_buf(v[0], 8))
		return post_atomic(k, IB_WR_ATOMIC_CMP_AND_SWP, "CMP_SWAP",
				   v[0], v[1], v[2], v[3], v[4]);
	if (!strcmp(op, "frwr") && n == 2 && v[1] && in_buf(v[0], v[1]))
		return post_reg_mr(k, v[0], v[1]);
	if (!strcmp(op, "inv") && n == 0)
		return post_local_inv(k);
	return -EINVAL;
}

static int run_command(struct kverbs *k, char *line, char *out, size_t room)
{
	u64 v[WORDS];
	char *op, *word;
	int n = 0, err;

	op = strsep(&line, " \t\n");
	if (op && !strcmp(op, "type")) {
		word = strsep(&line, " \t\n");
		err = word ? kverbs_retype(k, word) : -EINVAL;
		goto out;
	}
	while ((word = strsep(&line, " \t\n"))) {
		if (!*word)
			continue;
		if (n == WORDS || kstrtou64(word, 0, &v[n]))
			return -EINVAL;
		n++;
	}
	if (!op || !*op)
		return -EINVAL;
	if (!strcmp(op, "connect") && n == 3)
		err = kverbs_connect(k, v[0], v[1], v[2]);
	else if (!strcmp(op, "poll") && n == 2)
		return cmd_poll(k, v[0], v[1], out, room);
	else if (!strcmp(op, "fill") && n == 3 && in_buf(v[0], v[1])) {
		u64 i;

		for (i = 0; i < v[1]; i++)
			((u8 *)k->buf)[v[0] + i] = pattern(v[2], i);
		err = 0;
	} else if (!strcmp(op, "check") && n == 3 && in_buf(v[0], v[1]))
		return cmd_check(k, v[0], v[1], v[2], out, room);
	else if (!strcmp(op, "word") && n == 1 && in_buf(v[0], 8)) {
		snprintf(out, room, "word 0x%llx\n",
			 *(u64 *)(k->buf + v[0]));
		return 0;
	} else if (!strcmp(op, "limit") && n == 1) {
		err = arm_srq_limit(k, v[0]);
	} else if (!strcmp(op, "drain") && n == 0) {
		ib_drain_qp(k->qp);
		err = 0;
	} else {
		err = cmd_post(k, op, v, n);
	}
out:
	if (!err)
		snprintf(out, room, "ok\n");
	return err;
}

/* ---- the control file ---- */

static ssize_t ctl_write(struct file *file, const char __user *ubuf,
			 size_t len, loff_t *ppos)
{
	char line[256];
	struct kverbs *k;
	int err;

	if (len >= sizeof(line))
		return -EINVAL;
	if (copy_from_user(line, ubuf, len))
		return -EFAULT;
	line[len] = 0;
	mutex_lock(&kv_mutex);
	k = kv;
	if (!k) {
		mutex_unlock(&kv_mutex);
		return -ENODEV;
	}
	mutex_lock(&k->cmd_mutex);
	k->result[0] = 0;
	err = run_command(k, line, k->result, RESULT_SIZE);
	if (err)
		snprintf(k->result, RESULT_SIZE, "error %d\n", err);
	mutex_unlock(&k->cmd_mutex);
	mutex_unlock(&kv_mutex);
	return err ? err : len;
}

static const char *state_name(enum ib_qp_state s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS",
					     "SQD", "SQE", "ERR" };

	return s < ARRAY_SIZE(names) ? names[s] : "?";
}

static size_t describe(struct kverbs *k, char *out, size_t room)
{
	struct ib_qp_init_attr init;
	struct ib_port_attr port;
	struct ib_qp_attr attr;
	union ib_gid gid = {};
	unsigned long flags;
	size_t used;

	if (ib_query_port(k->dev, PORT, &port))
		port.lid = 0;
	rdma_query_gid(k->dev, PORT, 0, &gid);
	if (ib_query_qp(k->qp, &attr, IB_QP_STATE, &init))
		attr.qp_state = IB_QPS_ERR + 1;
	used = scnprintf(out, room,
			 "qpn 0x%x\ntype %s\nlid %u\ngid %pI6\npsn 0x%x\naddr 0x%llx\nrkey 0x%x\nsize %u\nstate %s\nfrwr_rkey 0x%x\nfrwr_iova 0x%llx\n",
			 k->qp->qp_num,
			 k->qp->qp_type == IB_QPT_RC ? "RC" : "UC", port.lid, gid.raw, k->psn, k->dma,
			 k->pd->unsafe_global_rkey, buf_size,
			 state_name(attr.qp_state), k->frwr ? k->frwr->rkey : 0,
			 k->frwr ? k->frwr->iova : 0);
	if (k->srq) {
		struct ib_srq_attr srq_attr;

		if (!ib_query_srq(k->srq, &srq_attr))
			used += scnprintf(out + used, room - used,
					  "srq_limit %u\nsrq_qp %s\n",
					  srq_attr.srq_limit,
					  k->qp->srq ? "yes" : "no");
	}
	spin_lock_irqsave(&k->lock, flags);
	used += scnprintf(out + used, room - used, "events %s\n",
			  k->events[0] ? k->events : "none");
	spin_unlock_irqrestore(&k->lock, flags);
	mutex_lock(&k->cmd_mutex);
	used += scnprintf(out + used, room - used, "result\n%s", k->result);
	mutex_unlock(&k->cmd_mutex);
	return used;
}

static ssize_t ctl_read(struct file *file, char __user *ubuf, size_t len,
			loff_t *ppos)
{
	char *text = kmalloc(2 * RESULT_SIZE, GFP_KERNEL);
	size_t used = 0;
	ssize_t ret;

	if (!text)
		return -ENOMEM;
	mutex_lock(&kv_mutex);
	if (kv)
		used = describe(kv, text, 2 * RESULT_SIZE);
	mutex_unlock(&kv_mutex);
	ret = used ? simple_read_from_buffer(ubuf, len, ppos, text, used) :
		     -ENODEV;
	kfree(text);
	return ret;
}

static const struct file_operations ctl_fops = {
	.owner = THIS_MODULE,
	.read = ctl_read,
	.write = ctl_write,
	.llseek = default_llseek,
};

static int __init kverbs_init(void)
{
	int err = ib_register_client(&kverbs_client);

	if (err)
		return err;
	mutex_lock(&kv_mutex);
	err = kv ? 0 : -ENODEV;
	mutex_unlock(&kv_mutex);
	if (err) {
		pr_err("ibemu_kverbs_test: no usable device %s\n", device);
		ib_unregister_client(&kverbs_client);
		return err;
	}
	debug_dir = debugfs_create_dir("ibemu_kverbs", NULL);
	debugfs_create_file("ctl", 0600, debug_dir, NULL, &ctl_fops);
	return 0;
}

static void __exit kverbs_exit(void)
{
	debugfs_remove_recursive(debug_dir);
	ib_unregister_client(&kverbs_client);
}

module_init(kverbs_init);
module_exit(kverbs_exit);
MODULE_DESCRIPTION("A kernel verbs consumer for ibemu's qemu test");
MODULE_LICENSE("GPL");
