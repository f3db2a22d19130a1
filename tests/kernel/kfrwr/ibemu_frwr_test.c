// SPDX-License-Identifier: GPL-2.0
/*
 * ibemu_frwr_test: a kernel consumer for the qemu test (never installed)
 * that checks the fast registration verbs of an ibemu device which need no
 * connection: what query_device advertises, ib_alloc_mr's limits,
 * ib_map_mr_sg of kernel pages, ib_update_fast_reg_key, ib_dereg_mr. Like a
 * ULP it registers an ib_client and runs its checks on the device it is
 * told to use (module parameter `device`, default ibemu0) when the device
 * is added. It keeps one FRWR MR while loaded, so that the test can see
 * the daemon's kernel plane hold it.
 *
 * /sys/kernel/debug/ibemu_frwr_test/result: one line per check, "ok WHAT"
 * or "FAIL WHAT: DETAIL".
 */
#include <linux/debugfs.h>
#include <linux/gfp.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>

static char *device = "ibemu0";
module_param(device, charp, 0444);
MODULE_PARM_DESC(device, "the RDMA device to check (default ibemu0)");

#define RESULT_SIZE 4096
#define PAGES 4 /* of the buffer the checks map */

struct frwr_test {
	struct ib_pd *pd;
	struct ib_mr *kept;
	struct page *pages;
	char result[RESULT_SIZE];
	size_t used;
};

static struct frwr_test *test;
static struct dentry *debug_dir;
static DEFINE_MUTEX(test_mutex); /* test and its result */

static __printf(4, 5) void report(struct frwr_test *t, bool ok,
				  const char *what, const char *fmt, ...)
{
	va_list args;

	t->used += scnprintf(t->result + t->used, RESULT_SIZE - t->used,
			     "%s %s", ok ? "ok" : "FAIL", what);
	if (!ok && fmt) {
		t->used += scnprintf(t->result + t->used,
				     RESULT_SIZE - t->used, ": ");
		va_start(args, fmt);
		t->used += vscnprintf(t->result + t->used,
				      RESULT_SIZE - t->used, fmt, args);
		va_end(args);
	}
	t->used += scnprintf(t->result + t->used, RESULT_SIZE - t->used, "\n");
}

static void check_attrs(struct frwr_test *t, struct ib_device *dev)
{
	report(t, dev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS,
	       "the device advertises IB_DEVICE_MEM_MGT_EXTENSIONS", "flags 0x%llx",
	       (unsigned long long)dev->attrs.device_cap_flags);
	report(t, dev->attrs.max_fast_reg_page_list_len == 512,
	       "max_fast_reg_page_list_len is 512", "%u",
	       dev->attrs.max_fast_reg_page_list_len);
}

/* ib_alloc_mr() of `type` and `max`: whether it gave an MR (kept in *mr,
 * or freed when mr is NULL); *err the errno otherwise. */
static bool try_alloc(struct frwr_test *t, enum ib_mr_type type, u32 max,
		      struct ib_mr **mr, long *err)
{
	struct ib_mr *got = ib_alloc_mr(t->pd, type, max);

	*err = IS_ERR(got) ? PTR_ERR(got) : 0;
	if (IS_ERR(got))
		return false;
	if (mr)
		*mr = got;
	else
		ib_dereg_mr(got);
	return true;
}

static void check_alloc_limits(struct frwr_test *t, struct ib_device *dev)
{
	u32 max = dev->attrs.max_fast_reg_page_list_len;
	long err;
	bool ok;

	ok = try_alloc(t, IB_MR_TYPE_MEM_REG, max, NULL, &err);
	report(t, ok,
	       "ib_alloc_mr(MEM_REG) of the longest page list, then ib_dereg_mr",
	       "%ld", err);
	ok = !try_alloc(t, IB_MR_TYPE_MEM_REG, max + 1, NULL, &err);
	report(t, ok && err == -EINVAL,
	       "ib_alloc_mr(MEM_REG) of a longer one: EINVAL", "%ld", err);
	ok = !try_alloc(t, IB_MR_TYPE_SG_GAPS, 8, NULL, &err);
	report(t, ok && err == -EINVAL, "ib_alloc_mr(SG_GAPS): EINVAL", "%ld",
	       err);
}

/* ib_map_mr_sg() of `nents` entries of the test's pages, as a ULP maps
 * an I/O's buffer. */
static int map(struct frwr_test *t, struct ib_mr *mr, struct scatterlist *sg,
	       int nents)
{
	int mapped;

	if (ib_dma_map_sg(t->pd->device, sg, nents, DMA_BIDIRECTIONAL) != nents)
		return -EIO;
	mapped = ib_map_mr_sg(mr, sg, nents, NULL, PAGE_SIZE);
	ib_dma_unmap_sg(t->pd->device, sg, nents, DMA_BIDIRECTIONAL);
	return mapped;
}

/* Two pages' worth starting 100 bytes into the first: one MR, two pages,
 * the iova the first byte's address (the device's DMA addresses are
 * kernel virtual ones). */
static void check_map(struct frwr_test *t, struct ib_mr *mr)
{
	void *base = page_address(t->pages);
	struct scatterlist sg[2];
	int mapped;

	sg_init_table(sg, 2);
	sg_set_buf(&sg[0], base + 100, PAGE_SIZE - 100);
	sg_set_buf(&sg[1], base + PAGE_SIZE, PAGE_SIZE);
	mapped = map(t, mr, sg, 2);
	report(t, mapped == 2, "ib_map_mr_sg maps two pages", "%d", mapped);
	report(t, mr->iova == (u64)(uintptr_t)base + 100 &&
		  mr->length == 2 * PAGE_SIZE - 100 && mr->page_size == PAGE_SIZE,
	       "the mapping's iova, length and page size",
	       "iova 0x%llx length %llu page size %u", mr->iova, mr->length,
	       mr->page_size);
}

/* An MR of one page maps a prefix of a longer list. */
static void check_short_list(struct frwr_test *t)
{
	void *base = page_address(t->pages);
	struct scatterlist sg[2];
	struct ib_mr *mr;
	long err;
	int mapped;

	if (!try_alloc(t, IB_MR_TYPE_MEM_REG, 1, &mr, &err)) {
		report(t, false, "an MR of one page", "%ld", err);
		return;
	}
	sg_init_table(sg, 2);
	sg_set_buf(&sg[0], base, PAGE_SIZE);
	sg_set_buf(&sg[1], base + PAGE_SIZE, PAGE_SIZE);
	mapped = map(t, mr, sg, 2);
	report(t, mapped == 1 && mr->length == PAGE_SIZE,
	       "an MR of one page maps the first of two", "%d, length %llu",
	       mapped, mr->length);
	ib_dereg_mr(mr);
}

static void run_checks(struct frwr_test *t, struct ib_device *dev)
{
	u32 key;
	long err;

	check_attrs(t, dev);
	check_alloc_limits(t, dev);
	if (!try_alloc(t, IB_MR_TYPE_MEM_REG, PAGES, &t->kept, &err)) {
		report(t, false, "an MR kept while loaded", "%ld", err);
		return;
	}
	report(t, t->kept->lkey == t->kept->rkey && (t->kept->lkey >> 8),
	       "its lkey and rkey are one key with an index", "0x%x 0x%x",
	       t->kept->lkey, t->kept->rkey);
	check_map(t, t->kept);
	check_short_list(t);
	key = t->kept->rkey;
	ib_update_fast_reg_key(t->kept, (u8)(key + 1));
	report(t, t->kept->rkey >> 8 == key >> 8 && t->kept->rkey != key,
	       "ib_update_fast_reg_key changes the key byte only", "0x%x 0x%x",
	       key, t->kept->rkey);
}

static int frwr_add(struct ib_device *dev)
{
	struct frwr_test *t;

	if (strcmp(dev_name(&dev->dev), device))
		return -EOPNOTSUPP;
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	t->pages = alloc_pages(GFP_KERNEL | __GFP_ZERO, get_order(PAGES * PAGE_SIZE));
	t->pd = ib_alloc_pd(dev, 0);
	if (!t->pages || IS_ERR(t->pd)) {
		report(t, false, "a PD and pages", NULL);
		t->pd = IS_ERR(t->pd) ? NULL : t->pd;
	} else {
		run_checks(t, dev);
	}
	mutex_lock(&test_mutex);
	test = t;
	mutex_unlock(&test_mutex);
	return 0;
}

static void frwr_remove(struct ib_device *dev, void *client_data)
{
	struct frwr_test *t;

	mutex_lock(&test_mutex);
	t = test;
	test = NULL;
	mutex_unlock(&test_mutex);
	if (!t)
		return;
	if (t->kept)
		ib_dereg_mr(t->kept);
	if (t->pd)
		ib_dealloc_pd(t->pd);
	if (t->pages)
		__free_pages(t->pages, get_order(PAGES * PAGE_SIZE));
	kfree(t);
}

static struct ib_client frwr_client = {
	.name = "ibemu_frwr_test",
	.add = frwr_add,
	.remove = frwr_remove,
};

static int result_show(struct seq_file *m, void *v)
{
	mutex_lock(&test_mutex);
	if (test)
		seq_puts(m, test->result);
	else
		seq_printf(m, "FAIL %s: no such device\n", device);
	mutex_unlock(&test_mutex);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(result);

static int __init frwr_test_init(void)
{
	int err;

	debug_dir = debugfs_create_dir("ibemu_frwr_test", NULL);
	debugfs_create_file("result", 0400, debug_dir, NULL, &result_fops);
	err = ib_register_client(&frwr_client);
	if (err)
		debugfs_remove_recursive(debug_dir);
	return err;
}

static void __exit frwr_test_exit(void)
{
	debugfs_remove_recursive(debug_dir);
	ib_unregister_client(&frwr_client);
}

module_init(frwr_test_init);
module_exit(frwr_test_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ibemu's qemu test: fast registration verbs of a kernel consumer");
