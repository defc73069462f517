/*
 * A stream's TLS: the handshake both ways, reads that decrypt every
 * record OpenSSL holds, writes of a record at a time from the output, and
 * close_notify; see stream.c for the rules all of it keeps (no callback
 * from here: what the owner must hear goes to s_notify and s_pending).
 * The OpenSSL calls themselves are lib/tls.c's.
 */
#include <sys/types.h>

#include <errno.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "stream.h"
#include "stream_int.h"
#include "tls.h"

/*
 * Decrypt what OpenSSL and the socket hold, up to room.  A short record
 * with nothing more inside OpenSSL ends it (the socket is most likely
 * empty: a read would only say EAGAIN); after a full record more is
 * likely and is read at once.
 */
void
stream_read_tls(struct stream *s, size_t room)
{
	struct evbuffer_iovec v;
	size_t want, off;
	unsigned long e;
	int r, more = 1;

	while (more && room != 0) {
		want = evbuffer_get_length(s->s_in) == 0 ? EVIO_OWN_READ
							 : STREAM_TLS_MORE;
		if (want > room)
			want = room;
		if (evbuffer_reserve_space(s->s_in, (ev_ssize_t)want, &v, 1) !=
		    1)
			abort(); /* allocation failure, as with xmalloc */
		if (v.iov_len > want)
			v.iov_len = want;
		for (off = 0, r = 1; off < v.iov_len;) {
			r = tls_io_read(s->s_ssl, (char *)v.iov_base + off,
			    v.iov_len - off, &e);
			if (r <= 0)
				break;
			off += (size_t)r;
			if ((size_t)r < STREAM_TLS_RECORD &&
			    !tls_has_pending(s->s_ssl)) {
				more = 0;
				break;
			}
		}
		v.iov_len = off;
		evbuffer_commit_space(s->s_in, &v, off != 0);
		room -= off;
		if (off != 0)
			s->s_notify |= STREAM_N_READ;
		if (r > 0)
			continue;
		switch (r) {
		case TLS_IO_WANT_READ:
			break;
		case TLS_IO_WANT_WRITE:
			s->s_flags |= STREAM_F_RD_WANTS_W;
			stream_update(s);
			break;
		case TLS_IO_EOF:
		case TLS_IO_DIRTY_EOF:
			stream_eof(s, r == TLS_IO_DIRTY_EOF);
			break;
		default:
			stream_fail(
			    s, STREAM_EV_ERROR | STREAM_EV_READING, errno, e);
			break;
		}
		return;
	}
	if (room == 0)
		(void)stream_read_room(s);
}

/*
 * SSL_write the output a record at a time, up to EVIO_MAX_IO: each
 * record is the first 16 KiB of the output made contiguous, so small
 * pieces appended in one pass leave as one record.  Returns the bytes
 * written, or -1 when it failed.
 */
ssize_t
stream_write_tls(struct stream *s)
{
	size_t len, n, done = 0;
	unsigned long e;
	unsigned char *p;
	int r;

	while (
	    (len = evbuffer_get_length(s->s_out)) != 0 && done < EVIO_MAX_IO) {
		n = s->s_tls_wlen != 0        ? s->s_tls_wlen
		    : len < STREAM_TLS_RECORD ? len
					      : STREAM_TLS_RECORD;
		if ((p = evbuffer_pullup(s->s_out, (ev_ssize_t)n)) == NULL)
			abort();
		r = tls_io_write(s->s_ssl, p, n, &e);
		if (r > 0) {
			s->s_tls_wlen = 0;
			evbuffer_drain(s->s_out, (size_t)r);
			done += (size_t)r;
			continue;
		}
		s->s_tls_wlen = n;
		if (r == TLS_IO_WANT_WRITE)
			s->s_flags |= STREAM_F_WBLOCKED;
		else if (r == TLS_IO_WANT_READ)
			s->s_flags |= STREAM_F_WR_WANTS_R;
		else {
			stream_fail(s, STREAM_EV_ERROR | STREAM_EV_WRITING,
			    r == TLS_IO_ERROR ? errno : EPIPE, e);
			return (-1);
		}
		break;
	}
	return ((ssize_t)done);
}

/* Take the TLS handshake on; it reports its own end or failure. */
void
stream_handshake(struct stream *s)
{
	unsigned long e;
	int r;

	s->s_flags &= ~(STREAM_F_HS_READ | STREAM_F_HS_WRITE);
	r = tls_io_handshake(s->s_ssl, &e);
	switch (r) {
	case 1:
		stream_open(s);
		return;
	case TLS_IO_WANT_READ:
		s->s_flags |= STREAM_F_HS_READ;
		break;
	case TLS_IO_WANT_WRITE:
		s->s_flags |= STREAM_F_HS_WRITE;
		break;
	default:
		/* A close in the handshake is an error with no TLS reason. */
		stream_fail(s, STREAM_EV_ERROR, r == TLS_IO_ERROR ? errno : 0,
		    r == TLS_IO_ERROR ? e : 0);
		return;
	}
	stream_update(s);
}

/*
 * Send close_notify once the output is empty: 1 when it is on the
 * socket, 0 to be tried again when the socket is writable, -1 when it
 * failed (reported).
 */
int
stream_close_notify(struct stream *s)
{
	unsigned long e = 0;
	int r;

	r = tls_io_close_notify(s->s_ssl, &e);
	if (r == TLS_IO_WANT_WRITE || r == TLS_IO_WANT_READ) {
		s->s_flags |= STREAM_F_WBLOCKED;
		return (0);
	}
	if (r != 1) {
		stream_fail(s, STREAM_EV_ERROR | STREAM_EV_WRITING, errno, e);
		return (-1);
	}
	return (1);
}
