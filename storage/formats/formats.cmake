# Interchange file formats (safetensors, GGUF), compiled into sy::storage.
# storage/CMakeLists.txt includes this file after sy_add_layer(storage ...).
target_sources(sy_storage PRIVATE ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/safetensors_writer.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/gguf.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/ggml_quants.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/text_file.cc)
target_link_libraries(sy_storage PRIVATE nlohmann_json::nlohmann_json)
