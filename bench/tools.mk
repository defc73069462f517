# The benchmark's own C tools: the origin server and the load generators
# (bench/TOOLS.md).  Included by the top Makefile, whose CC, ALL_CFLAGS,
# LDFLAGS, LDLIBS, BUILD and Q it uses; always built with -O2 so that the
# tools are never the bottleneck, whatever OPT says.

BENCH_TOOLS	 = $(BUILD)/bench/akbench-backend $(BUILD)/bench/akbench-ws \
		   $(BUILD)/bench/akbench-idle
BENCH_COMMON	 = $(BUILD)/bench/obj/common.o $(BUILD)/libak.a
BENCH_CFLAGS	 = $(ALL_CFLAGS) -O2 -Ibench

.PHONY: bench-tools bench-stream

bench-tools: $(BENCH_TOOLS) $(BUILD)/bench/akbench-grpc

$(BUILD)/bench/obj/%.o: bench/%.c bench/common.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(BENCH_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/bench/akbench-backend: $(BUILD)/bench/obj/backend.o $(BENCH_COMMON)
$(BUILD)/bench/akbench-ws: $(BUILD)/bench/obj/wsload.o $(BENCH_COMMON)
$(BUILD)/bench/akbench-idle: $(BUILD)/bench/obj/idle.o $(BENCH_COMMON)

$(BENCH_TOOLS):
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lm

# The gRPC echo server of workload 10 needs only nghttp2 and pthreads.
$(BUILD)/bench/akbench-grpc: $(BUILD)/bench/obj/grpc.o
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lnghttp2 -lpthread

# lib/stream.c against bufferevents, in one process (bench/stream_pair.c);
# BENCH_STREAM_ARGS passes options, e.g. "-n 1 -m 64".
$(BUILD)/bench/akbench-stream: $(BUILD)/bench/obj/stream_pair.o \
		$(BUILD)/libak.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bench-stream: $(BUILD)/bench/akbench-stream certs
	$(Q)CERTS_DIR=$(BUILD)/certs $(BUILD)/bench/akbench-stream \
	    $(BENCH_STREAM_ARGS)

-include $(wildcard $(BUILD)/bench/obj/*.d)
