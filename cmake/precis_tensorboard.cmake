# TensorBoard event files (summary/): protobuf (Debian's libprotobuf-dev + protobuf-compiler) for
# the Event messages of summary/tensorboard.proto, compiled by protoc at build time, and ISA-L
# (libisal-dev) for the CRC-32C of the TFRecord framing.
#
#   PRECIS_TENSORBOARD=AUTO  on when both are found; otherwise off with a warning, and
#                            SummaryWriter / precis-train --tensorboard throw, saying how to enable it
#   PRECIS_TENSORBOARD=ON    both are required (configure fails naming the missing package)
#   PRECIS_TENSORBOARD=OFF   never built
# scripts/install-deps.sh installs both, so `make build` / `make test` have it on.
set(PRECIS_TENSORBOARD AUTO CACHE STRING "TensorBoard event files: AUTO (when protobuf and ISA-L are found), ON or OFF")
set_property(CACHE PRECIS_TENSORBOARD PROPERTY STRINGS AUTO ON OFF)

set(PRECIS_WITH_TENSORBOARD OFF)
if(PRECIS_TENSORBOARD STREQUAL "AUTO" OR PRECIS_TENSORBOARD)
  find_package(Protobuf QUIET)
  find_library(PRECIS_ISAL_LIBRARY isal)
  find_path(PRECIS_ISAL_INCLUDE_DIR isa-l/crc.h)
  set(_tb_missing "")
  if(NOT Protobuf_FOUND OR NOT Protobuf_PROTOC_EXECUTABLE)
    list(APPEND _tb_missing "protobuf (libprotobuf-dev protobuf-compiler)")
  endif()
  if(NOT PRECIS_ISAL_LIBRARY OR NOT PRECIS_ISAL_INCLUDE_DIR)
    list(APPEND _tb_missing "ISA-L (libisal-dev)")
  endif()
  if(NOT _tb_missing)
    set(PRECIS_WITH_TENSORBOARD ON)
  elseif(PRECIS_TENSORBOARD STREQUAL "ON")
    message(FATAL_ERROR "PRECIS_TENSORBOARD=ON but not found: ${_tb_missing}. Run scripts/install-deps.sh")
  else()
    message(WARNING "precis: TensorBoard event files are OFF: not found: ${_tb_missing}. SummaryWriter and "
                    "precis-train --tensorboard will throw. Run scripts/install-deps.sh and reconfigure.")
  endif()
endif()
message(STATUS "precis: TensorBoard event files ${PRECIS_WITH_TENSORBOARD}")

# The generated Event classes: <build>/precis-proto/summary/tensorboard.pb.{h,cc}, included as
# "summary/tensorboard.pb.h" by summary/ (and by the read-back test).
if(PRECIS_WITH_TENSORBOARD)
  set(PRECIS_PROTO_DIR ${PROJECT_BINARY_DIR}/precis-proto)
  set(PRECIS_TENSORBOARD_PB_SOURCES ${PRECIS_PROTO_DIR}/summary/tensorboard.pb.cc)
  file(MAKE_DIRECTORY ${PRECIS_PROTO_DIR}/summary)
  add_custom_command(
    OUTPUT ${PRECIS_PROTO_DIR}/summary/tensorboard.pb.cc ${PRECIS_PROTO_DIR}/summary/tensorboard.pb.h
    COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${PROJECT_SOURCE_DIR} --cpp_out=${PRECIS_PROTO_DIR}
            ${PROJECT_SOURCE_DIR}/summary/tensorboard.proto
    DEPENDS ${PROJECT_SOURCE_DIR}/summary/tensorboard.proto ${Protobuf_PROTOC_EXECUTABLE}
    COMMENT "protoc summary/tensorboard.proto"
    VERBATIM)
endif()

# What a target compiling or linking the event code needs.
function(precis_tensorboard_usage target scope)
  if(PRECIS_WITH_TENSORBOARD)
    target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${PRECIS_PROTO_DIR}> ${PRECIS_ISAL_INCLUDE_DIR}
                               ${Protobuf_INCLUDE_DIRS})
    target_link_libraries(${target} ${scope} protobuf::libprotobuf ${PRECIS_ISAL_LIBRARY})
  endif()
endfunction()
