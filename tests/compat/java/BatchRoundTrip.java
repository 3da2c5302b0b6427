/*
 * The Apache RocketMQ 4.9.7 Java client, batches in and a push consumer out, for tests/compat/test_java_batch_drain.py.
 * Run as a single-file source program: rmqjava BatchRoundTrip.java NAMESRV TOPIC GROUP BATCHES BATCH_SIZE
 * Sends BATCHES batches of BATCH_SIZE messages (producer.send(Collection): a batch goes to one queue, so its records
 * lie back to back in the commit log, as a drain benchmark's backlog does), then consumes them all with a push
 * consumer of GROUP from the first offset. One JSON object a line on stdout:
 * {"event":"sent","count":..} {"event":"received","key":..,"queue":..,"offset":..,"body":..}
 * {"event":"done","complete":true|false}
 */
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class BatchRoundTrip {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2];
        int batches = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        DefaultMQProducer producer = new DefaultMQProducer("PG_" + group);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("p" + System.nanoTime());
        producer.setSendMsgTimeout(30000);
        producer.start();
        int sent = 0;
        for (int b = 0; b < batches; b++) {
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < size; i++) {
                int k = b * size + i;
                batch.add(new Message(topic, "TagB", "k" + k, ("java batch " + k).getBytes(StandardCharsets.UTF_8)));
            }
            producer.send(batch);
            sent += size;
        }
        System.out.println("{\"event\":\"sent\",\"count\":" + sent + "}");
        producer.shutdown();
        CountDownLatch latch = new CountDownLatch(sent);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setInstanceName("c" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                System.out.println("{\"event\":\"received\",\"key\":\"" + m.getKeys() + "\",\"queue\":" + m.getQueueId()
                    + ",\"offset\":" + m.getQueueOffset() + ",\"body\":\""
                    + new String(m.getBody(), StandardCharsets.UTF_8) + "\"}");
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean complete = latch.await(60, TimeUnit.SECONDS);
        consumer.shutdown();
        System.out.println("{\"event\":\"done\",\"complete\":" + complete + "}");
        System.exit(0);
    }
}
