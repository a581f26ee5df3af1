# The outbound HTTP engine shared by the remote backends (serper, qdrant, upstream), with the
# plugin scaffolding they share (remote.c) and the round-robin API keys (keyring.c): static, PIC.
add_library(sg_http STATIC ${CMAKE_CURRENT_LIST_DIR}/http.c ${CMAKE_CURRENT_LIST_DIR}/remote.c ${CMAKE_CURRENT_LIST_DIR}/keyring.c)
target_include_directories(sg_http PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/backends/include)
target_link_libraries(sg_http PUBLIC sg_lib PkgConfig::CURL PkgConfig::CJSON Threads::Threads m)
