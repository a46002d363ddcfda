#include "tests/model/torch_oracle_util.h"

#include <cstdlib>

namespace sy::testing {

bool PythonTorchAvailable(std::string* why) {
  const std::string cmd = std::string(kOraclePython) + " -c 'import torch' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    *why = std::string(kOraclePython) + " cannot import torch (install Debian's python3-torch)";
    return false;
  }
  return true;
}

nlohmann::json ModelConfigJson(const ModelConfig& c) {
  return nlohmann::json{{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"num_layers", c.num_layers},
                        {"num_heads", c.num_heads},
                        {"num_kv_heads", c.num_kv_heads},
                        {"head_dim", c.head_dim},
                        {"intermediate_size", c.intermediate_size},
                        {"num_experts", c.num_experts},
                        {"moe_intermediate_size", c.moe_intermediate_size},
                        {"top_k", c.top_k},
                        {"norm_topk_prob", c.norm_topk_prob},
                        {"num_shared_experts", c.num_shared_experts},
                        {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
                        {"shared_expert_gate", c.shared_expert_gate},
                        {"first_k_dense", c.first_k_dense},
                        {"moe_every", c.moe_every},
                        {"capacity_factor", c.capacity_factor},
                        {"router_aux_loss_coef", c.router_aux_loss_coef},
                        {"router_z_loss_coef", c.router_z_loss_coef},
                        {"pregate", c.pregate},
                        {"rope_theta", c.rope_theta},
                        {"rms_norm_eps", c.rms_norm_eps},
                        {"qk_norm", c.qk_norm},
                        {"qk_norm_per_head", c.qk_norm_per_head},
                        {"attention_bias", c.attention_bias},
                        {"attention_out_bias", c.attention_out_bias},
                        {"tie_word_embeddings", c.tie_word_embeddings}};
}

}  // namespace sy::testing
