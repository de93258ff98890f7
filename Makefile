# lmcache-aerospike: the C engine, its tests and benchmarks.
#
#   make            build the engine (build/liblmca.a), C tests and benchmarks
#   make test       run every test (C tests plain and under ASan/UBSan, pytest)
#   make SAN=asan   build under build/asan with AddressSanitizer + UBSan
#   make bench      run the engine-vs-libaerospike benchmark on the test server
#
# libaerospike comes from scripts/deps.sh (see docs/compatibility.md, "Dependencies").

.DEFAULT_GOAL := all
SAN ?=
BUILD ?= build$(if $(SAN),/$(SAN))
CC ?= cc
WERROR ?= $(if $(CI),-Werror)
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wstrict-prototypes -Wwrite-strings -Wshadow $(WERROR)
SANFLAGS_asan := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SANFLAGS_tsan := -fsanitize=thread
SANFLAGS := $(SANFLAGS_$(SAN))

DEPS_MK := .deps/aerospike.mk
-include $(DEPS_MK)
$(DEPS_MK): scripts/deps.sh
	scripts/deps.sh

ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) $(SANFLAGS) -Iinclude -Isrc/engine -Isrc/async
# libaerospike's headers are not -Wextra clean (system headers silence that)
# and use GNU `asm`, which strict C11 spells __asm__.
AS_INC := $(patsubst -I%,-isystem %,$(AS_CFLAGS)) -Dasm=__asm__

ENGINE_SRC := $(wildcard src/engine/*.c src/async/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/c/test_*.c)
TEST_BIN := $(TEST_SRC:tests/c/%.c=$(BUILD)/tests/%)
TEST_LIB := $(BUILD)/tests/harness.o
# bench/c/soak_*.c are parts of the soak, linked into it, not programs.
BENCH_SRC := $(filter-out bench/c/soak_%.c,$(wildcard bench/c/*.c))
BENCH_BIN := $(BENCH_SRC:bench/c/%.c=$(BUILD)/bench/%)

.PHONY: all test bench clean
all: $(BUILD)/liblmca.a $(TEST_BIN) $(BENCH_BIN)

$(BUILD)/%.o: %.c $(DEPS_MK) $(wildcard include/*.h src/*/*.h tests/c/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AS_INC) -c $< -o $@

$(BUILD)/liblmca.a: $(ENGINE_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/harness.o: tests/c/harness.c tests/c/harness.h $(DEPS_MK)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AS_INC) -Itests/c -c $< -o $@

$(BUILD)/tests/%: $(BUILD)/tests/c/%.o $(TEST_LIB) $(BUILD)/liblmca.a
	$(CC) $(ALL_CFLAGS) $^ $(AS_LIBS) -o $@

# Objects before the library: a program's extra objects (soak's, below) come
# after liblmca.a in $^ and would not pull in what only they call.
$(BUILD)/bench/%: $(BUILD)/bench/c/%.o $(BUILD)/liblmca.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(filter %.o,$^) $(filter-out %.o,$^) $(AS_LIBS) -o $@

# The rule above links every prerequisite, this object included.
$(BUILD)/bench/soak: $(BUILD)/bench/c/soak_workload.o
$(BUILD)/bench/c/soak.o $(BUILD)/bench/c/soak_workload.o: bench/c/soak.h

test:
	scripts/test.sh

bench: all
	scripts/bench.sh

clean:
	rm -rf build
.SECONDARY:
