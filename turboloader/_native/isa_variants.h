/* Compiles an implementation header once per ISA level. Define TL_IMPL as the header's
 * name (a string) and include this file: the header is compiled with TL_FN(name) naming the
 * variant (name_baseline, name_sse41, name_avx2) and TL_TGT its target attribute (simd.h).
 * The header holds straight C loops; each variant is the same arithmetic, so the same bits. */
#ifndef TL_IMPL
#error "define TL_IMPL as the implementation header to compile per ISA level"
#endif

#define TL_FN(name) name##_baseline
#define TL_TGT
#include TL_IMPL
#undef TL_FN
#undef TL_TGT

#if TL_X86
#define TL_FN(name) name##_sse41
#define TL_TGT TL_TARGET_SSE41
#include TL_IMPL
#undef TL_FN
#undef TL_TGT

#define TL_FN(name) name##_avx2
#define TL_TGT TL_TARGET_AVX2
#include TL_IMPL
#undef TL_FN
#undef TL_TGT
#endif
