# akgateway — one plain GNU Makefile.
#
# Knobs: CC=gcc|clang, SANITIZE=address,undefined, ERR=1 (-Werror; on when
# CI=true), BUILD=dir, V=1.

CC		?= cc
BUILD		?= build
SANITIZE	?=
PREFIX		?= /usr/local
VERSION		:= 0.1.0

ifeq ($(CI),true)
ERR		?= 1
endif

WARN	 = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	   -Wformat=2 -Wwrite-strings -Wpointer-arith -Wundef
ifeq ($(ERR),1)
WARN	+= -Werror
endif

PKGS	 = libevent libevent_openssl libevent_pthreads openssl libnghttp2 \
	   libcares yaml-0.1 jansson libsystemd
PKG_CFLAGS	:= $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS	:= $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT	?= -O2 -g
CFLAGS	?=
ALL_CFLAGS = -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE \
	   -DAK_VERSION='"$(VERSION)"' -Ilib $(PKG_CFLAGS) $(CFLAGS)
LDLIBS	 = $(PKG_LIBS) -lwslay -lpthread
ifneq ($(SANITIZE),)
ALL_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer \
	   -fno-sanitize-recover=all
LDFLAGS	+= -fsanitize=$(SANITIZE)
endif

LIB_SRC	 = $(sort $(wildcard lib/*.c))
GW_SRC	 = $(sort $(filter-out gateway/main.c,$(wildcard gateway/*.c)))
TUN_SRC	 = $(sort $(filter-out tunnel-client/main.c,$(wildcard tunnel-client/*.c)))
UNIT_SRC = $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRC = $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ	 = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
GW_OBJ	 = $(GW_SRC:%.c=$(BUILD)/obj/%.o)
TUN_OBJ	 = $(TUN_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

DEB_PKGS = gcc clang make pkg-config libevent-dev libssl-dev libnghttp2-dev \
	   libwslay-dev libc-ares-dev libyaml-dev libjansson-dev libsystemd-dev \
	   libcmocka-dev libclang-rt-14-dev clang-format curl openssl \
	   iproute2 procps python3 python3-websockets python3-pil libnss3-tools \
	   nghttp2-client nghttp2-server python3-h2 python3-grpcio chromium \
	   man-db groff-base

ifeq ($(V),1)
Q =
else
Q = @
endif

.PHONY: all deps test test-build check unit fuzz run certs install uninstall \
	clean \
	format format-check bench bench-quick bench-deps deb-install \
	bench-tools valgrind

all: $(BUILD)/akgateway $(BUILD)/aktunnel $(BUILD)/libak.a

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libak.a: $(LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libgw.a: $(GW_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libtun.a: $(TUN_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/akgateway: $(BUILD)/obj/gateway/main.o $(BUILD)/libgw.a $(BUILD)/libak.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/aktunnel: $(BUILD)/obj/tunnel-client/main.o $(BUILD)/libtun.a $(BUILD)/libak.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Unit tests: test_gw_* link the gateway, test_tun_* the tunnel client,
# the rest lib/ alone.
TEST_CC = $(CC) $(ALL_CFLAGS) -Igateway -Itunnel-client $(LDFLAGS)

$(BUILD)/tests/test_gw_%: tests/unit/test_gw_%.c $(BUILD)/libgw.a $(BUILD)/libak.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(TEST_CC) -o $@ $^ $(LDLIBS) -lcmocka

# The HTTP/1 and HTTP/2 engines live in gateway/ and are tested on their own.
$(BUILD)/tests/test_h1s: tests/unit/test_h1s.c $(BUILD)/libgw.a $(BUILD)/libak.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(TEST_CC) -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/tests/test_h2s: tests/unit/test_h2s.c $(BUILD)/libgw.a $(BUILD)/libak.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(TEST_CC) -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/tests/test_tun_%: tests/unit/test_tun_%.c $(BUILD)/libtun.a $(BUILD)/libak.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(TEST_CC) -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libak.a
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(TEST_CC) -o $@ $^ $(LDLIBS) -lcmocka

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# Install every Debian package the build and the tests need; a no-op when
# all are present.
deps:
	@$(MAKE) -s --no-print-directory deb-install PKGLIST="$(DEB_PKGS)"

# The contenders and load tools of bench/ (nginx, HAProxy, h2o, sshd, wrk, h2load,
# gnuplot); only "make bench" needs them.
BENCH_PKGS = wrk nginx-light haproxy openssh-server openssh-client \
	nghttp2-client h2o gnuplot-nox socat curl procps iproute2 util-linux
bench-deps: deps
	@$(MAKE) -s --no-print-directory deb-install PKGLIST="$(BENCH_PKGS)"

deb-install:
	@missing=""; for p in $(PKGLIST); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	        grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing$$missing"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	        --no-install-recommends $$missing; \
	fi

unit: $(UNIT_BIN)
test-build: all certs $(UNIT_BIN)

# Everything: unit tests then end-to-end tests, one summary line at the end.
test: deps
	$(Q)$(MAKE) --no-print-directory test-build
	$(Q)BUILD=$(BUILD) sh tests/run.sh $(UNIT_BIN)

check:
	$(Q)$(MAKE) --no-print-directory BUILD=build/san \
	    SANITIZE=address,undefined test

valgrind: all $(UNIT_BIN)
	$(Q)for t in $(UNIT_BIN); do \
	    valgrind -q --error-exitcode=1 --leak-check=full $$t || exit 1; done

# libFuzzer harnesses, built with clang.
fuzz:
	$(Q)$(MAKE) --no-print-directory CC=clang BUILD=build/fuzz \
	    SANITIZE=address,undefined,fuzzer-no-link build/fuzz/libak.a \
	    build/fuzz/libgw.a
	$(Q)mkdir -p build/fuzz/bin
	$(Q)for f in $(FUZZ_SRC); do \
	    n=$$(basename $$f .c); echo "  FUZZ    build/fuzz/bin/$$n"; \
	    clang $(ALL_CFLAGS) -Igateway -fsanitize=address,undefined,fuzzer \
	        -o build/fuzz/bin/$$n $$f build/fuzz/libgw.a build/fuzz/libak.a \
	        $(LDLIBS) || exit 1; done

certs: $(BUILD)/certs/server.crt

$(BUILD)/certs/server.crt: certs/mkcerts.sh
	$(Q)sh certs/mkcerts.sh $(BUILD)/certs

run: deps all certs
	$(BUILD)/akgateway

# bench/tools.mk builds the C backend and load tools into $(BUILD)/bench.
-include bench/tools.mk

bench: bench-deps all certs bench-tools
	$(Q)BUILD=$(BUILD) sh bench/run.sh

bench-quick: bench-deps all certs bench-tools
	$(Q)BUILD=$(BUILD) QUICK=1 sh bench/run.sh

# make install [PREFIX=/usr/local] [DESTDIR=]: the programs, the systemd
# units, the example configurations, the documentation and the man pages.
# The units and man pages name /usr/local's paths; the installed copies name
# these.  No root needed when the target directories are writable.
BINDIR		= $(PREFIX)/bin
DATADIR		= $(PREFIX)/share
DOCDIR		= $(DATADIR)/doc/akgateway
EXAMPLEDIR	= $(DATADIR)/akgateway/examples
MANDIR		= $(DATADIR)/man
UNITDIR		= $(PREFIX)/lib/systemd/system
USERUNITDIR	= $(PREFIX)/lib/systemd/user
INSTALL		?= install
INSTALL_SED	= sed -e 's|/usr/local/bin/|$(BINDIR)/|g' \
	-e 's|/usr/local/share/doc/akgateway/|$(DOCDIR)/|g' \
	-e 's|/usr/local/share/akgateway/examples/|$(EXAMPLEDIR)/|g' \
	-e 's|/usr/local/lib/systemd/system/|$(UNITDIR)/|g' \
	-e 's|/usr/local/lib/systemd/user/|$(USERUNITDIR)/|g'
MAN_PAGES = man/akgateway.8 man/aktunnel.1 man/akgateway.yaml.5
# man/NAME.N goes to MANDIR/manN/NAME.N.
MAN_DEST = $(foreach m,$(MAN_PAGES),$(MANDIR)/man$(subst .,,$(suffix $m))/$(notdir $m))
DOC_FILES = README.md $(sort $(wildcard docs/*.md))

install: all
	@echo "  INSTALL $(DESTDIR)$(PREFIX)"
	@rm -rf $(BUILD)/install && mkdir -p $(BUILD)/install
	$(Q)for f in config/akgateway.service config/aktunnel.service \
	    $(MAN_PAGES); do \
	    $(INSTALL_SED) $$f >$(BUILD)/install/$${f##*/} || exit 1; done
	$(Q)$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(EXAMPLEDIR) $(DESTDIR)$(DOCDIR) \
	    $(sort $(dir $(addprefix $(DESTDIR),$(MAN_DEST))))
	$(Q)$(INSTALL) -m 755 $(BUILD)/akgateway $(BUILD)/aktunnel \
	    $(DESTDIR)$(BINDIR)
	$(Q)$(INSTALL) -m 644 $(BUILD)/install/akgateway.service \
	    $(DESTDIR)$(UNITDIR)
	$(Q)$(INSTALL) -m 644 $(BUILD)/install/aktunnel.service \
	    $(DESTDIR)$(USERUNITDIR)
	$(Q)$(INSTALL) -m 644 config/gateway.yaml \
	    $(DESTDIR)$(EXAMPLEDIR)/akgateway.yaml
	$(Q)$(INSTALL) -m 644 config/gateway-https.yaml \
	    $(DESTDIR)$(EXAMPLEDIR)/akgateway-https.yaml
	$(Q)$(INSTALL) -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)
	$(Q)for d in $(MAN_DEST); do \
	    $(INSTALL) -m 644 $(BUILD)/install/$${d##*/} $(DESTDIR)$$d || \
	    exit 1; done

# Remove what install wrote, and the directories that were akgateway's own.
uninstall:
	@echo "  RM      $(DESTDIR)$(PREFIX)"
	$(Q)rm -f $(DESTDIR)$(BINDIR)/akgateway $(DESTDIR)$(BINDIR)/aktunnel \
	    $(DESTDIR)$(UNITDIR)/akgateway.service \
	    $(DESTDIR)$(USERUNITDIR)/aktunnel.service \
	    $(DESTDIR)$(EXAMPLEDIR)/akgateway.yaml \
	    $(DESTDIR)$(EXAMPLEDIR)/akgateway-https.yaml \
	    $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOC_FILES))) \
	    $(addprefix $(DESTDIR),$(MAN_DEST))
	$(Q)rmdir $(DESTDIR)$(EXAMPLEDIR) $(DESTDIR)$(DATADIR)/akgateway \
	    $(DESTDIR)$(DOCDIR) 2>/dev/null || true

FMT_SRC = $(wildcard lib/*.[ch] gateway/*.[ch] tunnel-client/*.[ch] \
	tests/unit/*.[ch] tests/fuzz/*.[ch])

format:
	clang-format -i $(FMT_SRC)

format-check:
	clang-format --dry-run --Werror $(FMT_SRC)

clean:
	rm -rf build
