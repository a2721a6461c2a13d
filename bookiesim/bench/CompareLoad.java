// bookiesim bench compare: the second load, through upstream BookKeeper's own client. Compiled
// at run time against an installation's lib/*.jar (nothing of upstream's is in bookiesim's
// repository). It does what bookiesim's load client (bench/load_client.py) does, through the
// public client API: N ledgers (E=Qw=Qa=1 on the one bookie registered under the metadata
// service, CRC32C digest, empty password), then `adds` adds of `size` zero bytes round robin
// over them with asyncAddEntry, at most `window` in flight, either as fast as the bookie
// answers or paced at `rate` adds per second; each add's latency from the call to its
// callback. Two JSON lines on stdout (the client's log goes to stderr):
//
//   {"t":"ready","ledgers":10,"setup_seconds":0.8}    ledgers created, channels connected,
//                                                      its JIT warmed; then it waits for a
//                                                      line on stdin before the timed adds
//   {"t":"done","adds":N,"errors":0,"seconds":S,"first_error":null,"latency_us":[...]}
//
// latency_us holds every successful add's latency in microseconds, in the order sent; the
// Python side turns them into the same percentiles as its own client's.
//
// Arguments: metadataServiceUri ledgers adds size window rate(0: peak) channelsPerBookie

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public final class CompareLoad {
    /** Ledgers being created at once: 10,000 of them one after the other would take minutes
     *  of metadata round trips before the first add. */
    private static final int CREATES_IN_FLIGHT = 100;
    private static final int WARM_UP = 10_000;
    private static final int WARM_UP_LEDGERS = 10;

    private CompareLoad() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: CompareLoad uri ledgers adds size window rate channels");
            System.exit(2);
        }
        String uri = args[0];
        int ledgers = Integer.parseInt(args[1]);
        int adds = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int window = Integer.parseInt(args[4]);
        double rate = Double.parseDouble(args[5]);
        int channels = Integer.parseInt(args[6]);

        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        // Upstream's default throttle is a rate limiter of 5,000 adds/s per ledger handle: at
        // 10 ledgers it would be the ceiling measured. The window below bounds the load.
        conf.setThrottleValue(0);
        conf.setNumChannelsPerBookie(channels);
        BookKeeper bk = new BookKeeper(conf);
        try {
            long setup = System.nanoTime();
            List<LedgerHandle> handles = create(bk, ledgers);
            connect(handles, channels);
            warmUp(handles, size, window);
            emit("{\"t\":\"ready\",\"ledgers\":" + handles.size() + ",\"setup_seconds\":"
                    + seconds(System.nanoTime() - setup) + "}");
            // The caller starts measuring the bookie, then says go.
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            emitDone(run(handles, adds, size, window, rate));
        } finally {
            bk.close();
        }
    }

    private static List<LedgerHandle> create(BookKeeper bk, int ledgers) throws Exception {
        LedgerHandle[] handles = new LedgerHandle[ledgers];
        Semaphore inFlight = new Semaphore(CREATES_IN_FLIGHT);
        CountDownLatch created = new CountDownLatch(ledgers);
        AtomicReference<String> failure = new AtomicReference<>();
        for (int i = 0; i < ledgers; i++) {
            inFlight.acquire();
            final int index = i;
            bk.asyncCreateLedger(1, 1, 1, BookKeeper.DigestType.CRC32C, new byte[0],
                    (rc, lh, ctx) -> {
                        if (rc == BKException.Code.OK) {
                            handles[index] = lh;
                        } else {
                            failure.compareAndSet(null, BKException.getMessage(rc));
                        }
                        inFlight.release();
                        created.countDown();
                    }, null, null);
        }
        created.await();
        if (failure.get() != null) {
            throw new IllegalStateException("creating a ledger failed: " + failure.get());
        }
        List<LedgerHandle> list = new ArrayList<>(ledgers);
        for (LedgerHandle lh : handles) {
            list.add(lh);
        }
        return list;
    }

    /** One add on the first ledger of each channel (the pool picks a channel by ledger id
     *  modulo the channels), so that connecting, which takes a cold JVM a second or two, is
     *  not timed: the Python client connects before its clock starts too. The bookie sees at
     *  most `channels` adds more than the run's. */
    private static void connect(List<LedgerHandle> handles, int channels) throws Exception {
        Set<Long> connected = new HashSet<>();
        for (LedgerHandle lh : handles) {
            if (connected.add(Math.floorMod(lh.getId(), (long) channels))) {
                lh.addEntry(new byte[1]);
            }
        }
    }

    /** WARM_UP adds at the peak over the first WARM_UP_LEDGERS ledgers, untimed: a cold JVM
     *  interprets the add path for its first thousands of calls, and a paced run's first
     *  second would measure that, not the bookie. Few ledgers, so that the bookie's work on
     *  a ledger's first add stays in the run for (nearly) all of them. */
    private static void warmUp(List<LedgerHandle> handles, int size, int window)
            throws InterruptedException {
        List<LedgerHandle> some = handles.subList(0, Math.min(WARM_UP_LEDGERS, handles.size()));
        Result warm = run(some, WARM_UP, size, window, 0);
        if (warm.errors > 0) {
            throw new IllegalStateException("warming up: " + warm.firstError);
        }
    }

    /** What a run of adds did: its time, its failures, each add's latency (-1: failed). */
    private record Result(long elapsed, int errors, String firstError, long[] latency) {}

    private static Result run(List<LedgerHandle> handles, int adds, int size, int window,
            double rate) throws InterruptedException {
        byte[] payload = new byte[size];
        long[] sentAt = new long[adds];
        long[] latency = new long[adds];
        Semaphore room = new Semaphore(window);
        CountDownLatch answered = new CountDownLatch(adds);
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        long start = System.nanoTime();
        for (int n = 0; n < adds; n++) {
            if (rate > 0) {
                long due = start + (long) (n / rate * 1e9);
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    LockSupport.parkNanos(wait);
                }
            }
            room.acquire();
            final int index = n;
            sentAt[index] = System.nanoTime();
            handles.get(n % handles.size()).asyncAddEntry(payload, (rc, lh, entryId, ctx) -> {
                long now = System.nanoTime();
                if (rc == BKException.Code.OK) {
                    latency[index] = now - sentAt[index];
                } else {
                    latency[index] = -1;
                    errors.incrementAndGet();
                    firstError.compareAndSet(null, BKException.getMessage(rc));
                }
                room.release();
                answered.countDown();
            }, null);
        }
        answered.await();
        return new Result(System.nanoTime() - start, errors.get(), firstError.get(), latency);
    }

    private static void emitDone(Result result) {
        int ok = result.latency.length - result.errors;
        StringBuilder line = new StringBuilder(64 + ok * 6);
        line.append("{\"t\":\"done\",\"adds\":").append(ok)
                .append(",\"errors\":").append(result.errors)
                .append(",\"seconds\":").append(seconds(result.elapsed))
                .append(",\"first_error\":").append(quote(result.firstError))
                .append(",\"latency_us\":[");
        String comma = "";
        for (long nanos : result.latency) {
            if (nanos >= 0) {
                line.append(comma).append(TimeUnit.NANOSECONDS.toMicros(nanos));
                comma = ",";
            }
        }
        emit(line.append("]}").toString());
    }

    private static String seconds(long nanos) {
        return String.format(Locale.ROOT, "%.6f", nanos / 1e9);
    }

    private static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String quote(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
