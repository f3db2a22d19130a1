// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel consumers' memory regions and the copies that reach them
 * (docs/design/kernel-consumers.md, section 6.1): DMA MRs, whose iova is a
 * kernel virtual address of direct-mapped RAM. The daemon's engine checks
 * keys, bounds and access; the module decides which kernel memory a copy
 * may touch.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "ibemu.h"

/* A kernel consumer's DMA MR (get_dma_mr): every direct-mapped address. */
struct ibemu_mr {
	struct ib_mr ibmr;
	struct ibemu_dev *dev;
	u32 pd;
	u32 access; /* IBEMU_DATA_ACCESS_* */
	struct list_head node; /* dev's DMA MRs, for the replay */
	struct ibemu_data_cmd *dereg_cmd;
	struct rcu_head rcu;
};

static u32 dma_mr_access(int access)
{
	u32 a = access & (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			  IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC);

	/* Remote write and atomics imply local write (IBA 10.6.3.1). */
	if (a & (IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC))
		a |= IB_ACCESS_LOCAL_WRITE;
	return a;
}

/*
 * Every PD gets one from ib_alloc_pd (its local_dma_lkey), with remote
 * access when the consumer wants an unsafe global rkey (SRP, iSER). Keys
 * are IBA-shaped: an index in bits 8-31, never 0, and a key byte of 0. The
 * engine registers the MR as all of direct-mapped memory (REG_DMA_MR) and
 * reaches it through IBEMU_IOC_COPY.
 */
struct ib_mr *ibemu_get_dma_mr(struct ib_pd *pd, int access)
{
	struct ibemu_dev *dev = to_dev(pd->device);
	struct ibemu_data_reg_dma_mr reg = {
		.hdr.type = IBEMU_DATA_REG_DMA_MR,
		.hdr.length = sizeof(reg),
		.pd = to_pd(pd)->number,
		.access = dma_mr_access(access),
	};
	struct ibemu_data_dereg_mr dereg = {
		.hdr.type = IBEMU_DATA_DEREG_MR,
		.hdr.length = sizeof(dereg),
	};
	struct ibemu_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	int index, err;

	if (!mr)
		return ERR_PTR(-ENOMEM);
	index = ida_alloc_range(&dev->mr_indexes, 1, 0xffffff, GFP_KERNEL);
	if (index < 0) {
		err = index;
		goto free;
	}
	mr->dev = dev;
	mr->pd = reg.pd;
	mr->access = reg.access;
	mr->ibmr.lkey = (u32)index << 8;
	mr->ibmr.rkey = mr->ibmr.lkey;
	reg.key = mr->ibmr.lkey;
	dereg.mr = index;
	mr->dereg_cmd = ibemu_data_cmd_alloc(&dereg, sizeof(dereg), GFP_KERNEL);
	if (IS_ERR(mr->dereg_cmd)) {
		err = PTR_ERR(mr->dereg_cmd);
		goto free_index;
	}
	mutex_lock(&dev->obj_mutex);
	err = xa_insert(&dev->mrs, index, mr, GFP_KERNEL);
	if (!err) {
		err = ibemu_data_queue_command(dev, &reg, sizeof(reg),
					       GFP_KERNEL);
		if (err)
			xa_erase(&dev->mrs, index);
	}
	if (!err)
		list_add_tail(&mr->node, &dev->dma_mrs);
	mutex_unlock(&dev->obj_mutex);
	if (err)
		goto free_cmd;
	return &mr->ibmr;

free_cmd:
	ibemu_data_cmd_free(mr->dereg_cmd);
free_index:
	ida_free(&dev->mr_indexes, index);
free:
	kfree(mr);
	return ERR_PTR(err);
}

/* The DMA MRs of a device for a new channel, under obj_mutex. */
void ibemu_mr_replay(struct ibemu_dev *dev)
{
	struct ibemu_mr *mr;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(mr, &dev->dma_mrs, node) {
		struct ibemu_data_reg_dma_mr reg = {
			.hdr.type = IBEMU_DATA_REG_DMA_MR,
			.hdr.length = sizeof(reg),
			.key = mr->ibmr.lkey,
			.pd = mr->pd,
			.access = mr->access,
		};
		struct ibemu_data_cmd *cmd =
			ibemu_data_cmd_alloc(&reg, sizeof(reg), GFP_KERNEL);

		if (IS_ERR(cmd)) {
			ibdev_err(&dev->ibdev, "MR 0x%x not replayed: out of memory\n",
				  mr->ibmr.lkey);
			continue;
		}
		ibemu_data_cmd_submit(dev, cmd);
	}
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

/*
 * A DMA MR's copy ("direct" mode, design 6.1): iova is a kernel virtual
 * address, checked page by page. The MR only names the device's consent;
 * the engine has checked the WQE's keys, bounds and access already.
 * `bounce` is a page of the caller's.
 */
long ibemu_mr_copy(struct ibemu_dev *dev,
		   const struct ibemu_data_copy_segment *seg, void *bounce)
{
	void __user *buf = u64_to_user_ptr(seg->buffer);
	unsigned long addr = seg->iova;
	u32 left = seg->length;
	bool known;

	rcu_read_lock();
	known = xa_load(&dev->mrs, seg->mr) != NULL;
	rcu_read_unlock();
	if (!known)
		return -ENOENT;
	/* Generation 0 is a DMA MR's only mapping; FRWR comes with step 3. */
	if (seg->generation)
		return -ESTALE;
	while (left) {
		u32 n = min_t(u32, left, PAGE_SIZE - offset_in_page(addr));

		if (!direct_ram(addr))
			return -EACCES;
		/* A page taken out of the direct map (secret memory, a
		 * guarded allocation) faults: EACCES, not an oops. */
		if (seg->direction == IBEMU_DATA_COPY_TO_KERNEL) {
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
		addr += n;
		buf += n;
		left -= n;
		cond_resched();
	}
	return seg->length;
}

int ibemu_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct ibemu_mr *mr = container_of(ibmr, struct ibemu_mr, ibmr);
	struct ibemu_dev *dev = mr->dev;

	mutex_lock(&dev->obj_mutex);
	list_del(&mr->node);
	xa_erase(&dev->mrs, ibmr->lkey >> 8);
	ibemu_data_cmd_submit(dev, mr->dereg_cmd);
	mutex_unlock(&dev->obj_mutex);
	ida_free(&dev->mr_indexes, ibmr->lkey >> 8);
	kfree_rcu(mr, rcu);
	return 0;
}
