/*
 * Send latency percentiles for issue 15 ("p99 send latency no worse than Java's"), driven by bench/send_latency.py.
 *
 * RocketMQ's benchmark.Producer prints only average and max RT, so this program applies the same load (N threads
 * sending S-byte bodies synchronously through ONE DefaultMQProducer, i.e. one client connection, ROCKETMQ-serialized
 * headers, no compression) and records every send's latency after a warm-up in a per-thread log-linear histogram.
 * At the end it prints one JSON line on stdout; the client's own logs go to stderr (rmqjava's logback config).
 *
 * With -r RATE the load is open instead of closed: each thread sends on a fixed schedule (RATE/THREADS a second, from
 * a staggered start) and a send's latency runs from when it was due, not from when a late thread got to it, so a
 * stalled broker is charged for the sends it held up (no "coordinated omission"). That compares the tails of two
 * brokers at the same offered load, where the closed load's latency is bound to its throughput (mean = THREADS/TPS).
 *
 * Usage: SendLatency -n NAMESRV -t TOPIC [-w THREADS] [-s SIZE] [-d SECONDS] [-u WARMUP_SECONDS] [-r RATE]
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.SerializeType;

public final class SendLatency {

    /**
     * Latencies in microseconds: exact below 1024 us, then 512 sub-buckets per power of two (under 0.2% error), as
     * HdrHistogram does with fewer features. Fixed size, so a long run costs no more memory than a short one, and
     * one per thread, so recording takes no lock.
     */
    static final class Histogram {
        static final int LINEAR = 1024;
        static final int HALF = LINEAR / 2;
        static final int SHIFTS = 44;
        final long[] counts = new long[LINEAR + SHIFTS * HALF];
        long count;
        long sumMicros;
        long maxMicros;

        static int index(long micros) {
            if (micros < LINEAR) {
                return (int) Math.max(micros, 0);
            }
            int shift = 63 - Long.numberOfLeadingZeros(micros) - 9; // micros >> shift is in [512, 1023]
            return LINEAR + (shift - 1) * HALF + (int) ((micros >> shift) - HALF);
        }

        /** The highest value a bucket holds: a percentile is never reported lower than the latency it stands for. */
        static long upperBound(int index) {
            if (index < LINEAR) {
                return index;
            }
            int shift = (index - LINEAR) / HALF + 1;
            long sub = (index - LINEAR) % HALF + HALF;
            return ((sub + 1) << shift) - 1;
        }

        void record(long micros) {
            counts[Math.min(index(micros), counts.length - 1)]++;
            count++;
            sumMicros += micros;
            maxMicros = Math.max(maxMicros, micros);
        }

        void add(Histogram other) {
            for (int i = 0; i < counts.length; i++) {
                counts[i] += other.counts[i];
            }
            count += other.count;
            sumMicros += other.sumMicros;
            maxMicros = Math.max(maxMicros, other.maxMicros);
        }

        long percentile(double fraction) {
            long rank = Math.max(1, (long) Math.ceil(fraction * count));
            long seen = 0;
            for (int i = 0; i < counts.length; i++) {
                seen += counts[i];
                if (seen >= rank) {
                    return Math.min(upperBound(i), maxMicros);
                }
            }
            return maxMicros;
        }
    }

    static final class Sender implements Runnable {
        final DefaultMQProducer producer;
        final String topic;
        final byte[] body;
        final long measureFromNanos;
        final long stopAtNanos;
        final long intervalNanos; // 0: closed load, the next send as soon as the last one is answered
        long dueNanos;
        final CountDownLatch done;
        final Histogram histogram = new Histogram();
        long warmupSent;
        long warmupFailed;
        long failed;
        long notOk;
        String lastError;

        Sender(DefaultMQProducer producer, String topic, byte[] body, long measureFromNanos, long stopAtNanos,
            long intervalNanos, long firstDueNanos, CountDownLatch done) {
            this.producer = producer;
            this.topic = topic;
            this.body = body;
            this.measureFromNanos = measureFromNanos;
            this.stopAtNanos = stopAtNanos;
            this.intervalNanos = intervalNanos;
            this.dueNanos = firstDueNanos;
            this.done = done;
        }

        @Override
        public void run() {
            try {
                while (true) {
                    long begin = System.nanoTime();
                    if (intervalNanos > 0) {
                        while (begin < dueNanos) {
                            LockSupport.parkNanos(dueNanos - begin);
                            begin = System.nanoTime();
                        }
                        begin = dueNanos;
                        dueNanos += intervalNanos;
                    }
                    if (begin >= stopAtNanos) {
                        return;
                    }
                    boolean measured = begin >= measureFromNanos;
                    try {
                        SendResult result = producer.send(new Message(topic, body));
                        long micros = (System.nanoTime() - begin) / 1000;
                        if (!measured) {
                            warmupSent++;
                            continue;
                        }
                        histogram.record(micros);
                        if (result.getSendStatus() != SendStatus.SEND_OK) {
                            notOk++;
                        }
                    } catch (Exception e) {
                        // the client already retried within its send budget: count it, and do not spin on a dead broker
                        if (measured) {
                            failed++;
                        } else {
                            warmupFailed++;
                        }
                        lastError = e.getClass().getSimpleName() + ": " + e.getMessage();
                        try {
                            Thread.sleep(100);
                        } catch (InterruptedException ie) {
                            return;
                        }
                    }
                }
            } finally {
                done.countDown();
            }
        }
    }

    private static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        if (fallback == null) {
            throw new IllegalArgumentException("missing option " + name);
        }
        return fallback;
    }

    private static String ms(long micros) {
        return String.format(Locale.ROOT, "%.3f", micros / 1000.0);
    }

    private static String quoted(String text) {
        if (text == null) {
            return "null";
        }
        return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    /** p50/p90/p99/p999/max/mean of a histogram in milliseconds, as a JSON object. */
    static String latencyJson(Histogram h) {
        return "{\"p50\":" + ms(h.percentile(0.50))
            + ",\"p90\":" + ms(h.percentile(0.90))
            + ",\"p99\":" + ms(h.percentile(0.99))
            + ",\"p999\":" + ms(h.percentile(0.999))
            + ",\"max\":" + ms(h.maxMicros)
            + ",\"mean\":" + ms(h.count == 0 ? 0 : h.sumMicros / h.count) + "}";
    }

    /**
     * --histogram: record the microsecond values read from stdin (one a line) and print their count and
     * percentiles, so a test can check the histogram against a known distribution without a broker.
     */
    private static void histogramCheck() throws Exception {
        Histogram h = new Histogram();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isBlank()) {
                h.record(Long.parseLong(line.trim()));
            }
        }
        System.out.println("{\"count\":" + h.count + ",\"latency_ms\":" + latencyJson(h) + "}");
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--histogram")) {
            histogramCheck();
            return;
        }
        // what benchmark.Producer does: binary headers, so both tools cost the broker the same decode
        System.setProperty(RemotingCommand.SERIALIZE_TYPE_PROPERTY, SerializeType.ROCKETMQ.name());
        String namesrv = option(args, "-n", null);
        String topic = option(args, "-t", null);
        int threads = Integer.parseInt(option(args, "-w", "16"));
        int size = Integer.parseInt(option(args, "-s", "1024"));
        double seconds = Double.parseDouble(option(args, "-d", "30"));
        double warmup = Double.parseDouble(option(args, "-u", "5"));
        double rate = Double.parseDouble(option(args, "-r", "0"));

        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) {
            body[i] = (byte) ('a' + i % 26);
        }
        DefaultMQProducer producer = new DefaultMQProducer("send_latency_producer");
        producer.setInstanceName("send_latency_" + System.nanoTime());
        producer.setNamesrvAddr(namesrv);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.start();

        long start = System.nanoTime();
        long measureFrom = start + (long) (warmup * 1e9);
        long stopAt = measureFrom + (long) (seconds * 1e9);
        CountDownLatch done = new CountDownLatch(threads);
        Sender[] senders = new Sender[threads];
        for (int i = 0; i < threads; i++) {
            long interval = rate > 0 ? (long) (threads * 1e9 / rate) : 0;
            long firstDue = start + interval * i / threads;
            senders[i] = new Sender(producer, topic, body, measureFrom, stopAt, interval, firstDue, done);
            Thread thread = new Thread(senders[i], "send-latency-" + i);
            thread.setDaemon(true);
            thread.start();
        }
        done.await();
        // sends still in flight at stopAt finish after it: the window is from measureFrom to the last one's end
        double measuredSeconds = (System.nanoTime() - measureFrom) / 1e9;
        producer.shutdown();

        Histogram all = new Histogram();
        long failed = 0;
        long notOk = 0;
        long warmupSent = 0;
        long warmupFailed = 0;
        String lastError = null;
        for (Sender sender : senders) {
            all.add(sender.histogram);
            failed += sender.failed;
            notOk += sender.notOk;
            warmupSent += sender.warmupSent;
            warmupFailed += sender.warmupFailed;
            if (sender.lastError != null) {
                lastError = sender.lastError;
            }
        }
        StringBuilder json = new StringBuilder(256);
        json.append("{\"threads\":").append(threads)
            .append(",\"size\":").append(size)
            .append(",\"rate\":").append(String.format(Locale.ROOT, "%.1f", rate))
            .append(",\"seconds\":").append(String.format(Locale.ROOT, "%.3f", measuredSeconds))
            .append(",\"warmup_sent\":").append(warmupSent)
            .append(",\"warmup_failed\":").append(warmupFailed)
            .append(",\"sent\":").append(all.count)
            .append(",\"failed\":").append(failed)
            .append(",\"not_ok\":").append(notOk)
            .append(",\"tps\":").append(String.format(Locale.ROOT, "%.1f", all.count / measuredSeconds))
            .append(",\"latency_ms\":").append(latencyJson(all))
            .append(",\"last_error\":").append(quoted(lastError))
            .append('}');
        System.out.println(json);
        System.out.flush();
        System.exit(0);
    }
}
