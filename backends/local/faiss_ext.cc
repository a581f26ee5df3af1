/*
 * faiss_ext.cc -- the C++ shim of faiss_ext.h over FAISS 1.7.3's C++ API (Debian's libfaiss.a).
 * Kept to what the C API lacks; everything else goes through the C API (faissidx.c).
 */
#include "faiss_ext.h"

#include <faiss/Index.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/IndexPQ.h>
#include <faiss/IndexPreTransform.h>
#include <faiss/IndexScalarQuantizer.h>
#include <faiss/impl/HNSW.h>
#include <faiss/index_io.h>
#include <faiss/invlists/OnDiskInvertedLists.h>

#include <cstdio>
#include <cstring>
#include <exception>

namespace
{

const faiss::Index *unwrap(const faiss::Index *ix)
{
    while (const faiss::IndexPreTransform *pt = dynamic_cast<const faiss::IndexPreTransform *>(ix))
        ix = pt->index;
    return ix;
}

faiss::Index *unwrap_mut(faiss::Index *ix)
{
    while (faiss::IndexPreTransform *pt = dynamic_cast<faiss::IndexPreTransform *>(ix))
        ix = pt->index;
    return ix;
}

const char *code_kind(const faiss::Index *ix)
{
    if (dynamic_cast<const faiss::IndexFlat *>(ix) != nullptr || dynamic_cast<const faiss::IndexIVFFlat *>(ix) != nullptr)
        return "Flat";
    if (dynamic_cast<const faiss::IndexScalarQuantizer *>(ix) != nullptr ||
        dynamic_cast<const faiss::IndexIVFScalarQuantizer *>(ix) != nullptr)
        return "SQ";
    if (dynamic_cast<const faiss::IndexPQ *>(ix) != nullptr || dynamic_cast<const faiss::IndexIVFPQ *>(ix) != nullptr)
        return "PQ";
    return "other";
}

void put_err(char *err, size_t err_size, const char *what, const char *msg)
{
    if (err == nullptr || err_size == 0)
        return;
    /* FAISS messages are multi-line ("Error in ... at file:line: reason"); keep the reason */
    const char *r = std::strstr(msg, ": ");
    if (r != nullptr && std::strstr(msg, "Error in") == msg)
        msg = r + 2;
    std::snprintf(err, err_size, "%s: %s", what, msg);
    for (char *p = err; *p != '\0'; ++p)
        if (*p == '\n')
            *p = ' ';
}

} // namespace

extern "C" void sg_fext_info(const void *index, sg_fext_info_t *out)
{
    std::memset(out, 0, sizeof(*out));
    const faiss::Index *ix = unwrap(static_cast<const faiss::Index *>(index));
    if (const faiss::IndexIVF *ivf = dynamic_cast<const faiss::IndexIVF *>(ix)) {
        out->kind = SG_FEXT_IVF;
        out->nlist = (int64_t)ivf->nlist;
        out->nprobe = (int)ivf->nprobe;
        out->code_size = ivf->code_size;
        const faiss::OnDiskInvertedLists *od = dynamic_cast<const faiss::OnDiskInvertedLists *>(ivf->invlists);
        /* an on-disk index file read with IO_FLAG_MMAP (which includes SKIP_IVF_DATA) is left unmapped */
        out->lists_mapped = od == nullptr ? 0 : od->ptr == nullptr && od->totsize > 0 ? -1 : 1;
        if (ivf->invlists != nullptr)
            for (size_t l = 0; l < ivf->invlists->nlist; ++l)
                out->list_bytes += ivf->invlists->list_size(l) * (ivf->code_size + sizeof(faiss::Index::idx_t));
        std::snprintf(out->storage, sizeof(out->storage), "%s", code_kind(ix));
    } else if (const faiss::IndexHNSW *h = dynamic_cast<const faiss::IndexHNSW *>(ix)) {
        out->kind = SG_FEXT_HNSW;
        out->ef_search = h->hnsw.efSearch;
        out->ef_construction = h->hnsw.efConstruction;
        out->hnsw_m = h->hnsw.nb_neighbors(1);
        if (const faiss::IndexFlatCodes *fc = dynamic_cast<const faiss::IndexFlatCodes *>(h->storage))
            out->code_size = fc->code_size;
        std::snprintf(out->storage, sizeof(out->storage), "%s", h->storage != nullptr ? code_kind(h->storage) : "none");
    } else if (const faiss::IndexFlat *f = dynamic_cast<const faiss::IndexFlat *>(ix)) {
        out->kind = SG_FEXT_FLAT;
        out->code_size = f->code_size;
        std::snprintf(out->storage, sizeof(out->storage), "Flat");
    } else {
        out->kind = SG_FEXT_OTHER;
        std::snprintf(out->storage, sizeof(out->storage), "%s", code_kind(ix));
    }
}

extern "C" int sg_fext_search(const void *index, int64_t n, const float *x, int64_t k, float *dist, int64_t *labels, int nprobe,
                              int ef_search, char *err, size_t err_size)
{
    const faiss::Index *top = static_cast<const faiss::Index *>(index);
    const faiss::Index *ix = unwrap(top);
    try {
        if (nprobe > 0) {
            if (dynamic_cast<const faiss::IndexIVF *>(ix) == nullptr) {
                put_err(err, err_size, "search failed", "nprobe given for an index that is not IVF");
                return -1;
            }
            faiss::SearchParametersIVF p;
            p.nprobe = (size_t)nprobe;
            top->search(n, x, k, dist, labels, &p);
        } else if (ef_search > 0) {
            if (dynamic_cast<const faiss::IndexHNSW *>(ix) == nullptr) {
                put_err(err, err_size, "search failed", "efSearch given for an index that is not HNSW");
                return -1;
            }
            faiss::SearchParametersHNSW p;
            p.efSearch = ef_search;
            top->search(n, x, k, dist, labels, &p);
        } else {
            top->search(n, x, k, dist, labels);
        }
    } catch (const std::exception &e) {
        put_err(err, err_size, "search failed", e.what());
        return -1;
    }
    return 0;
}

extern "C" int sg_fext_set_ef_search(void *index, int ef_search)
{
    faiss::IndexHNSW *h = dynamic_cast<faiss::IndexHNSW *>(unwrap_mut(static_cast<faiss::Index *>(index)));
    if (h == nullptr || ef_search < 1)
        return -1;
    h->hnsw.efSearch = ef_search;
    return 0;
}

extern "C" int sg_fext_set_nprobe(void *index, int nprobe)
{
    faiss::IndexIVF *ivf = dynamic_cast<faiss::IndexIVF *>(unwrap_mut(static_cast<faiss::Index *>(index)));
    if (ivf == nullptr || nprobe < 1)
        return -1;
    ivf->nprobe = (size_t)nprobe;
    return 0;
}

extern "C" int sg_fext_disable_prefetch(void *index)
{
    faiss::IndexIVF *ivf = dynamic_cast<faiss::IndexIVF *>(unwrap_mut(static_cast<faiss::Index *>(index)));
    if (ivf == nullptr)
        return 0;
    faiss::OnDiskInvertedLists *od = dynamic_cast<faiss::OnDiskInvertedLists *>(ivf->invlists);
    if (od == nullptr || od->prefetch_nthread == 0)
        return 0;
    od->prefetch_nthread = 0;
    return 1;
}

extern "C" int sg_fext_skip_polysemous(void *index)
{
    faiss::Index *ix = unwrap_mut(static_cast<faiss::Index *>(index));
    if (faiss::IndexIVFPQ *p = dynamic_cast<faiss::IndexIVFPQ *>(ix)) {
        int was = p->do_polysemous_training && !p->is_trained;
        p->do_polysemous_training = false;
        return was;
    }
    if (faiss::IndexPQ *p = dynamic_cast<faiss::IndexPQ *>(ix)) {
        int was = p->do_polysemous_training && !p->is_trained;
        p->do_polysemous_training = false;
        return was;
    }
    return 0;
}

extern "C" int sg_fext_io_flag_mmap(void)
{
    return faiss::IO_FLAG_MMAP;
}
