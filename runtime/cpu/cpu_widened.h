// Private to runtime/cpu: an f32 kernel run on 16-bit operands (Note [16-bit operands] in
// runtime/backend/backend.h).
//
// Most CPU operators are written once, for f32. When any of an operator's floating-point operands
// is bf16 or f16, the operator widens them instead: In() gives an f32 copy of an input (exact),
// Out() an f32 tensor for an output, and the destructor rounds each such output back into its
// 16-bit tensor (nearest even), once. The operator then calls itself on the f32 tensors:
//
//   void CpuBackend::Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
//     if (cpu::AnySixteenBit({&gate, &up, &out})) {
//       cpu::Widened w(*this);
//       return Swiglu(w.In(gate), w.In(up), w.Out(out));
//     }
//     ... the f32 kernel ...
//
// An output may alias an input: each gets its own f32 tensor, and the rounding back happens after
// the kernel has read every input. The temporaries come from the backend's Allocate (a bound
// workspace's arena, or the caching allocator), so a steady step allocates nothing new. The GEMMs
// do not widen this way: they read 16-bit operands in their own kernels (cpu_gemm.cc).
//
// Ownership: a Widened owns its temporaries until it is destroyed; it must not outlive the
// operator call. Thread-safety: as the Backend's operators (the compute stream's thread).
#pragma once

#include <initializer_list>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/tensor.h"

namespace sy::cpu {

// Whether any defined tensor among `tensors` is bf16 or f16.
bool AnySixteenBit(std::initializer_list<const Tensor*> tensors);

class Widened {
 public:
  explicit Widened(Backend& backend) : backend_(backend) {}
  ~Widened();
  Widened(const Widened&) = delete;
  Widened& operator=(const Widened&) = delete;

  // `t` itself when it is undefined or not bf16/f16; otherwise an f32 copy of its values.
  Tensor In(const Tensor& t);
  // `t` itself when it is undefined or not bf16/f16; otherwise an f32 tensor of its shape that the
  // destructor rounds into `t`. `accumulate`: it starts with t's values, for an operator that adds
  // into its output.
  Tensor Out(const Tensor& t, bool accumulate = false);

 private:
  Tensor Wide(const Tensor& t);

  Backend& backend_;
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (f32 temporary, 16-bit destination)
};

}  // namespace sy::cpu
