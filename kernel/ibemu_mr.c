// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel consumers' memory regions and the copies that reach them
 * (docs/design/kernel-consumers.md, sections 6.1 and 6.6). The daemon's
 * engine checks keys, bounds and access; the module decides which kernel
 * memory a copy may touch.
 *
 * A DMA MR (get_dma_mr: a PD's local_dma_lkey) names all direct-mapped RAM:
 * its iova is a kernel virtual address. An FRWR MR (alloc_mr) names the
 * pages of its current registration: map_mr_sg fills a working page list,
 * and posting IB_WR_REG_MR freezes a copy of it as a new mapping generation,
 * which the REG_MR record carries and the daemon's copies name; a copy
 * naming another generation gets ESTALE. Keys are IBA-shaped: an index in
 * bits 8-31 (the MR's handle on the data channel), never 0, and a key byte,
 * 0 for a DMA MR and the consumer's for an FRWR MR.
 *
 * Locks: dev->obj_mutex (create, destroy, replay) before dev->mrs' own
 * lock, which a copy takes only to count itself in. A posting QP's lock
 * before an FRWR MR's lock, which guards its frozen mapping in any context.
 */
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait_bit.h>

#include "ibemu.h"

/* A page list: page_size-aligned direct-map addresses. */
struct mr_pages {
	u64 *addrs;
	u32 count;
};

struct ibemu_mr {
	struct ib_mr ibmr;
	struct ibemu_dev *dev;
	u32 pd;
	u32 access; /* a DMA MR's: IBEMU_DATA_ACCESS_* */
	bool fast_reg;
	struct list_head node; /* dev->kmrs, for the replay */
	struct ibemu_data_cmd *dereg_cmd;
	/* Copies under way, counted in under dev->mrs' lock: dereg waits. */
	atomic_t copies;
	/* An FRWR MR's: */
	u32 max_pages;
	struct mr_pages working; /* map_mr_sg's, serialized by the ULP */
	spinlock_t lock;
	/* Under lock: what the last REG_MR posted froze. */
	struct mr_pages frozen;
	u32 generation; /* 0 before the first REG_MR */
	u64 iova, length;
	u32 page_size;
};

static struct ibemu_mr *to_mr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct ibemu_mr, ibmr);
}

/* The access a kernel MR grants: remote write and atomics imply local
 * write (IBA 10.6.3.1). */
static u32 mr_access(int access)
{
	u32 a = access & (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			  IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC);

	if (a & (IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC))
		a |= IB_ACCESS_LOCAL_WRITE;
	return a;
}

/* Direct-mapped RAM the kernel owns as such: not the kernel's image (its
 * pages are reserved), not I/O memory, not vmalloc space. */
static bool direct_ram(unsigned long addr)
{
	if (addr < PAGE_OFFSET || addr >= (unsigned long)high_memory)
		return false;
	if (!virt_addr_valid((void *)addr))
		return false;
	return !PageReserved(virt_to_page((void *)addr));
}

/* ---- creation, the replay, deregistration ---- */

union mr_create_rec {
	struct ibemu_data_reg_dma_mr dma;
	struct ibemu_data_alloc_mr frwr;
};

/* The command that creates `mr` in an engine, at creation and replay. An
 * FRWR MR is announced free: registrations do not outlive their engine. */
static size_t mr_create_record(const struct ibemu_mr *mr,
			       union mr_create_rec *rec)
{
	memset(rec, 0, sizeof(*rec));
	if (mr->fast_reg) {
		rec->frwr.hdr.type = IBEMU_DATA_ALLOC_MR;
		rec->frwr.hdr.length = sizeof(rec->frwr);
		rec->frwr.key = mr->ibmr.lkey;
		rec->frwr.pd = mr->pd;
		rec->frwr.max_pages = mr->max_pages;
		return sizeof(rec->frwr);
	}
	rec->dma.hdr.type = IBEMU_DATA_REG_DMA_MR;
	rec->dma.hdr.length = sizeof(rec->dma);
	rec->dma.key = mr->ibmr.lkey;
	rec->dma.pd = mr->pd;
	rec->dma.access = mr->access;
	return sizeof(rec->dma);
}

static void mr_free(struct ibemu_mr *mr)
{
	kvfree(mr->working.addrs);
	kvfree(mr->frozen.addrs);
	kfree(mr);
}

/* Numbers `mr` and announces it to the daemon; frees it on failure. */
static struct ib_mr *mr_add(struct ibemu_dev *dev, struct ibemu_mr *mr)
{
	struct ibemu_data_dereg_mr dereg = {
		.hdr.type = IBEMU_DATA_DEREG_MR,
		.hdr.length = sizeof(dereg),
	};
	union mr_create_rec rec;
	size_t len;
	int index, err;

	mr->dev = dev;
	atomic_set(&mr->copies, 0);
	index = ida_alloc_range(&dev->mr_indexes, 1, 0xffffff, GFP_KERNEL);
	if (index < 0) {
		err = index;
		goto free;
	}
	mr->ibmr.lkey = (u32)index << 8;
	mr->ibmr.rkey = mr->ibmr.lkey;
	dereg.mr = index;
	mr->dereg_cmd = ibemu_data_cmd_alloc(&dereg, sizeof(dereg), GFP_KERNEL);
	if (IS_ERR(mr->dereg_cmd)) {
		err = PTR_ERR(mr->dereg_cmd);
		goto free_index;
	}
	len = mr_create_record(mr, &rec);
	mutex_lock(&dev->obj_mutex);
	err = xa_insert(&dev->mrs, index, mr, GFP_KERNEL);
	if (!err) {
		err = ibemu_data_queue_command(dev, &rec, len, GFP_KERNEL);
		if (err)
			xa_erase(&dev->mrs, index);
	}
	if (!err)
		list_add_tail(&mr->node, &dev->kmrs);
	mutex_unlock(&dev->obj_mutex);
	if (err)
		goto unpublished;
	return &mr->ibmr;

unpublished:
	/* A copy may have found it meanwhile (a daemon naming a handle it
	 * was never told of). */
	wait_var_event(&mr->copies, !atomic_read(&mr->copies));
	ibemu_data_cmd_free(mr->dereg_cmd);
free_index:
	ida_free(&dev->mr_indexes, index);
free:
	mr_free(mr);
	return ERR_PTR(err);
}

/*
 * Every PD gets one from ib_alloc_pd (its local_dma_lkey), with remote
 * access when the consumer wants an unsafe global rkey (SRP, iSER). The
 * engine registers it as all of direct-mapped memory (REG_DMA_MR).
 */
struct ib_mr *ibemu_get_dma_mr(struct ib_pd *pd, int access)
{
	struct ibemu_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);

	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->pd = to_pd(pd)->number;
	mr->access = mr_access(access);
	return mr_add(to_dev(pd->device), mr);
}

/*
 * ib_alloc_mr(IB_MR_TYPE_MEM_REG): an MR for fast registration, free until
 * an IB_WR_REG_MR registers it. Its two page lists are allocated here, so
 * that mapping and posting, which may run in atomic context, allocate
 * nothing.
 */
struct ib_mr *ibemu_alloc_mr(struct ib_pd *pd, enum ib_mr_type type,
			     u32 max_num_sg)
{
	struct ibemu_dev *dev = to_dev(pd->device);
	struct ibemu_mr *mr;

	/* Neither SG_GAPS nor integrity MRs are advertised. */
	if (type != IB_MR_TYPE_MEM_REG || !max_num_sg ||
	    max_num_sg > dev->info.max_fast_reg_pages)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->pd = to_pd(pd)->number;
	mr->fast_reg = true;
	mr->max_pages = max_num_sg;
	spin_lock_init(&mr->lock);
	mr->working.addrs = kvcalloc(max_num_sg, sizeof(u64), GFP_KERNEL);
	mr->frozen.addrs = kvcalloc(max_num_sg, sizeof(u64), GFP_KERNEL);
	if (!mr->working.addrs || !mr->frozen.addrs) {
		mr_free(mr);
		return ERR_PTR(-ENOMEM);
	}
	return mr_add(dev, mr);
}

/* The MRs of a device for a new channel, under obj_mutex. */
void ibemu_mr_replay(struct ibemu_dev *dev)
{
	struct ibemu_mr *mr;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(mr, &dev->kmrs, node) {
		union mr_create_rec rec;
		size_t len = mr_create_record(mr, &rec);
		struct ibemu_data_cmd *cmd =
			ibemu_data_cmd_alloc(&rec, len, GFP_KERNEL);

		if (IS_ERR(cmd)) {
			ibdev_err(&dev->ibdev, "MR 0x%x not replayed: out of memory\n",
				  mr->ibmr.lkey);
			continue;
		}
		ibemu_data_cmd_submit(dev, cmd);
	}
}

/* Once no copy can find it and those under way have finished: the ULP may
 * free the memory behind it when this returns. */
int ibemu_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct ibemu_mr *mr = to_mr(ibmr);
	struct ibemu_dev *dev = mr->dev;
	u32 index = ibmr->lkey >> 8;

	mutex_lock(&dev->obj_mutex);
	list_del(&mr->node);
	xa_erase(&dev->mrs, index);
	ibemu_data_cmd_submit(dev, mr->dereg_cmd);
	mutex_unlock(&dev->obj_mutex);
	wait_var_event(&mr->copies, !atomic_read(&mr->copies));
	ida_free(&dev->mr_indexes, index);
	mr_free(mr);
	return 0;
}

/* ---- fast registration ---- */

/* ib_sg_to_pages()'s callback: a full list stops it (ib_map_mr_sg then
 * maps a prefix), and so does a page the daemon's copies could not reach. */
static int set_page(struct ib_mr *ibmr, u64 addr)
{
	struct ibemu_mr *mr = to_mr(ibmr);

	if (mr->working.count == mr->max_pages)
		return -ENOMEM;
	if (!direct_ram(addr))
		return -EINVAL;
	mr->working.addrs[mr->working.count++] = addr;
	return 0;
}

/* ib_map_mr_sg() has set ibmr->page_size; ib_sg_to_pages() sets iova and
 * length. The mapping is the working list's until a REG_MR freezes it. */
int ibemu_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset)
{
	struct ibemu_mr *mr = to_mr(ibmr);

	if (!mr->fast_reg || !is_power_of_2(ibmr->page_size) ||
	    ibmr->page_size < IBEMU_DATA_MIN_PAGE_SIZE ||
	    ibmr->page_size > IBEMU_DATA_MAX_PAGE_SIZE)
		return -EINVAL;
	mr->working.count = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, set_page);
}

/*
 * Posting IB_WR_REG_MR: the working page list becomes the MR's mapping, a
 * new generation; copies naming the one before get ESTALE from now on. The
 * record carries what the engine registers.
 */
int ibemu_mr_fill_reg_wr(struct ibemu_dev *dev, const struct ib_reg_wr *reg,
			 struct ibemu_data_fast_reg *out)
{
	struct ibemu_mr *mr;
	unsigned long flags;

	if (!reg->mr || reg->mr->device != &dev->ibdev)
		return -EINVAL;
	mr = to_mr(reg->mr);
	/* The new key keeps the MR's index (ib_update_fast_reg_key()). */
	if (!mr->fast_reg || reg->key >> 8 != mr->ibmr.lkey >> 8)
		return -EINVAL;
	/* Mapped, by a map_mr_sg() that checked the page size. */
	if (!is_power_of_2(mr->ibmr.page_size) ||
	    mr->ibmr.page_size < IBEMU_DATA_MIN_PAGE_SIZE ||
	    mr->ibmr.iova + mr->ibmr.length < mr->ibmr.iova)
		return -EINVAL;

	spin_lock_irqsave(&mr->lock, flags);
	memcpy(mr->frozen.addrs, mr->working.addrs,
	       mr->working.count * sizeof(u64));
	mr->frozen.count = mr->working.count;
	mr->iova = mr->ibmr.iova;
	mr->length = mr->ibmr.length;
	mr->page_size = mr->ibmr.page_size;
	if (!++mr->generation)
		mr->generation = 1; /* 0 is a DMA MR's */
	out->generation = mr->generation;
	spin_unlock_irqrestore(&mr->lock, flags);

	out->iova = mr->ibmr.iova;
	out->length = mr->ibmr.length;
	out->key = reg->key;
	out->access = mr_access(reg->access);
	out->page_size = mr->ibmr.page_size;
	return 0;
}

/* ---- copies (IBEMU_IOC_COPY) ---- */

/*
 * Where `iova` of an FRWR MR's mapping `generation` is, and how many of
 * `left` bytes follow it there (to the end of its page of the mapping).
 * The address is taken under the lock; the page stays the ULP's while the
 * engine holds the registration, which it gives up only once the copies
 * through it have returned.
 */
static int frwr_translate(struct ibemu_mr *mr, u32 generation, u64 iova,
			  u32 left, unsigned long *addr, u32 *n)
{
	unsigned long flags;
	u64 base, off, in_page;
	int err = 0;

	spin_lock_irqsave(&mr->lock, flags);
	if (!generation || generation != mr->generation) {
		err = -ESTALE;
	} else if (iova < mr->iova || iova - mr->iova >= mr->length) {
		err = -EACCES;
	} else {
		base = mr->iova & ~((u64)mr->page_size - 1);
		off = iova - base;
		in_page = off & (mr->page_size - 1);
		if ((off >> ilog2(mr->page_size)) >= mr->frozen.count) {
			err = -EACCES;
		} else {
			*addr = mr->frozen.addrs[off >> ilog2(mr->page_size)] +
				in_page;
			*n = min_t(u64, left, mr->page_size - in_page);
			*n = min_t(u64, *n, mr->iova + mr->length - iova);
		}
	}
	spin_unlock_irqrestore(&mr->lock, flags);
	return err;
}

/* A piece of a copy within one kernel page: its address and length. */
static int translate(struct ibemu_mr *mr, u32 generation, u64 iova, u32 left,
		     unsigned long *addr, u32 *n)
{
	int err;

	if (mr->fast_reg) {
		err = frwr_translate(mr, generation, iova, left, addr, n);
		if (err)
			return err;
	} else {
		/* Generation 0 is a DMA MR's only mapping: the iova is
		 * the kernel virtual address. */
		if (generation)
			return -ESTALE;
		*addr = iova;
		*n = left;
	}
	*n = min_t(u32, *n, PAGE_SIZE - offset_in_page(*addr));
	return 0;
}

/* copy_to_kernel_nofault() is not exported: the same with its primitive. */
static int write_nofault(void *dst, const void *src, size_t size)
{
	pagefault_disable();
	if (IS_ALIGNED((unsigned long)dst | (unsigned long)src, 8)) {
		for (; size >= 8; dst += 8, src += 8, size -= 8)
			__put_kernel_nofault(dst, src, u64, fault);
	}
	for (; size; dst++, src++, size--)
		__put_kernel_nofault(dst, src, u8, fault);
	pagefault_enable();
	return 0;
fault:
	pagefault_enable();
	return -EFAULT;
}

/* n bytes within one page of direct-mapped RAM, through `bounce`. A page
 * taken out of the direct map (secret memory, a guarded allocation) faults:
 * EACCES, not an oops. */
static int copy_piece(unsigned long addr, void __user *buf, u32 n,
		      u8 direction, void *bounce)
{
	if (!direct_ram(addr))
		return -EACCES;
	if (direction == IBEMU_DATA_COPY_TO_KERNEL) {
		if (copy_from_user(bounce, buf, n))
			return -EFAULT;
		if (write_nofault((void *)addr, bounce, n))
			return -EACCES;
	} else {
		if (copy_from_kernel_nofault(bounce, (void *)addr, n))
			return -EACCES;
		if (copy_to_user(buf, bounce, n))
			return -EFAULT;
	}
	return 0;
}

static long copy_through(struct ibemu_mr *mr,
			 const struct ibemu_data_copy_segment *seg,
			 void *bounce)
{
	void __user *buf = u64_to_user_ptr(seg->buffer);
	u64 iova = seg->iova;
	u32 left = seg->length;

	while (left) {
		unsigned long addr;
		u32 n;
		int err = translate(mr, seg->generation, iova, left, &addr, &n);

		if (!err)
			err = copy_piece(addr, buf, n, seg->direction, bounce);
		if (err)
			return err;
		iova += n;
		buf += n;
		left -= n;
		cond_resched();
	}
	return seg->length;
}

/*
 * One checked segment of IBEMU_IOC_COPY. The MR only gives its consent and
 * its translation: the engine has checked the WQE's keys, bounds and access
 * already. `bounce` is a page of the caller's.
 */
long ibemu_mr_copy(struct ibemu_dev *dev,
		   const struct ibemu_data_copy_segment *seg, void *bounce)
{
	struct ibemu_mr *mr;
	long ret;

	xa_lock(&dev->mrs);
	mr = xa_load(&dev->mrs, seg->mr);
	if (mr)
		atomic_inc(&mr->copies);
	xa_unlock(&dev->mrs);
	if (!mr)
		return -ENOENT;
	ret = copy_through(mr, seg, bounce);
	if (atomic_dec_and_test(&mr->copies))
		wake_up_var(&mr->copies);
	return ret;
}
