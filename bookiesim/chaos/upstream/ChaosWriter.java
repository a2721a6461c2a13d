// bookiesim chaos: a writer through upstream BookKeeper's own client, for `bookiesim chaos run
// --java-writers`. Compiled at run time against an installation's lib/*.jar (nothing of
// upstream's is in bookiesim's repository). It creates a ledger, adds entries one after the
// other and closes it, over and over until its time is up, exactly as bookiesim's own writer
// workload does, and prints every operation as one JSON line on stdout: the harness records
// them into the run's history, where the checker holds them to the same rules.
//
//   {"t":"invoke","id":7,"kind":"add","ledger":3,"payload":"<hex>"}
//   {"t":"ok","id":7,"entry":41}          {"t":"fail","id":7,"error":"..."}
//
// Arguments: metadataServiceUri ensemble writeQuorum ackQuorum seconds entriesPerLedger seed name

import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;

public final class ChaosWriter {
    private static long nextId = 0;

    private ChaosWriter() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println("usage: ChaosWriter uri ensemble writeQuorum ackQuorum seconds "
                    + "entriesPerLedger seed name");
            System.exit(2);
        }
        String uri = args[0];
        int ensemble = Integer.parseInt(args[1]);
        int writeQuorum = Integer.parseInt(args[2]);
        int ackQuorum = Integer.parseInt(args[3]);
        long end = System.nanoTime() + (long) (Double.parseDouble(args[4]) * 1e9);
        int perLedger = Integer.parseInt(args[5]);
        Random rng = new Random(Long.parseLong(args[6]));
        String name = args[7];

        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        // The same bounds as bookiesim's workloads: a bookie that does not answer within 5 s
        // is replaced by an ensemble change.
        conf.setAddEntryTimeout(5);
        conf.setReadEntryTimeout(5);
        conf.setZkTimeout(5000);
        BookKeeper bk = new BookKeeper(conf);
        try {
            while (System.nanoTime() < end) {
                long create = invoke("\"kind\":\"create\"");
                LedgerHandle lh;
                try {
                    lh = bk.createLedger(ensemble, writeQuorum, ackQuorum,
                            BookKeeper.DigestType.CRC32C, new byte[0]);
                } catch (BKException e) {
                    fail(create, e);
                    Thread.sleep(500);
                    continue;
                }
                ok(create, "\"ledger\":" + lh.getId());
                if (fill(lh, name, perLedger, end, rng)) {
                    close(lh);
                }
            }
        } finally {
            bk.close();
        }
    }

    /** Adds until the ledger has perLedger entries or the time is up; false after a failure
     *  (the ledger is then abandoned, left to the recoverers, as bookiesim's writer does). */
    private static boolean fill(LedgerHandle lh, String name, int perLedger, long end, Random rng)
            throws InterruptedException {
        for (int i = 0; i < perLedger && System.nanoTime() < end; i++) {
            byte[] prefix = (name + " " + lh.getId() + " " + i + " ").getBytes(StandardCharsets.UTF_8);
            byte[] payload = new byte[prefix.length + 64];
            System.arraycopy(prefix, 0, payload, 0, prefix.length);
            byte[] random = new byte[64];
            rng.nextBytes(random);
            System.arraycopy(random, 0, payload, prefix.length, 64);
            long add = invoke("\"kind\":\"add\",\"ledger\":" + lh.getId() + ",\"payload\":\""
                    + hex(payload) + "\"");
            try {
                long entry = lh.addEntry(payload);
                ok(add, "\"entry\":" + entry);
            } catch (BKException e) {
                fail(add, e);
                return false;
            }
        }
        return true;
    }

    private static void close(LedgerHandle lh) throws InterruptedException {
        long close = invoke("\"kind\":\"close\",\"ledger\":" + lh.getId());
        try {
            lh.close();
            LedgerMetadata metadata = lh.getLedgerMetadata();
            ok(close, "\"last_entry\":" + metadata.getLastEntryId() + ",\"length\":"
                    + metadata.getLength());
        } catch (BKException e) {
            fail(close, e);
        }
    }

    private static long invoke(String fields) {
        long id = ++nextId;
        emit("{\"t\":\"invoke\",\"id\":" + id + "," + fields + "}");
        return id;
    }

    private static void ok(long id, String fields) {
        emit("{\"t\":\"ok\",\"id\":" + id + "," + fields + "}");
    }

    private static void fail(long id, Exception e) {
        String text = e.getClass().getSimpleName() + ": " + e.getMessage();
        emit("{\"t\":\"fail\",\"id\":" + id + ",\"error\":" + quote(text) + "}");
    }

    private static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            out.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return out.toString();
    }

    private static String quote(String text) {
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
