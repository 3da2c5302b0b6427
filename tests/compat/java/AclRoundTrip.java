/*
 * The Apache RocketMQ 4.9.7 Java client against a broker with ACL, for tests/compat/test_acl_clients.py.
 * Run as a single-file source program: rmqjava AclRoundTrip.java NAMESRV TOPIC GROUP AK SK COUNT
 * (AK empty: no AclClientRPCHook). Sends COUNT messages (keys k0..), then, if any was sent, consumes them with a
 * push consumer of GROUP from the first offset. One JSON object a line on stdout:
 * {"event":"sent","key":..} {"event":"send_error","message":..} {"event":"received","key":..}
 * {"event":"done","complete":true|false}
 */
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

public class AclRoundTrip {
    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n").replace("\t", " ") + "\"";
    }

    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2], ak = a[3], sk = a[4];
        int n = Integer.parseInt(a[5]);
        RPCHook hook = ak.isEmpty() ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
        DefaultMQProducer producer = new DefaultMQProducer("PG_" + group, hook);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("p" + System.nanoTime());
        producer.setRetryTimesWhenSendFailed(0);
        // The timeout is not under test (a refusal is answered at once): it only has to outlast a cold JVM's first
        // route lookup, connection and ACL signing on a loaded machine, all of which the client counts against it.
        producer.setSendMsgTimeout(30000);
        producer.start();
        int sent = 0;
        for (int i = 0; i < n; i++) {
            try {
                producer.send(new Message(topic, "TagA", "k" + i, ("java acl " + i).getBytes(StandardCharsets.UTF_8)));
                System.out.println("{\"event\":\"sent\",\"key\":\"k" + i + "\"}");
                sent++;
            } catch (Exception e) {
                System.out.println("{\"event\":\"send_error\",\"message\":" + quote(e.toString()) + "}");
            }
        }
        producer.shutdown();
        boolean complete = true;
        if (sent > 0) {
            CountDownLatch latch = new CountDownLatch(sent);
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook, new AllocateMessageQueueAveragely());
            consumer.setNamesrvAddr(ns);
            consumer.setInstanceName("c" + System.nanoTime());
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    System.out.println("{\"event\":\"received\",\"key\":" + quote(m.getKeys()) + "}");
                    latch.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            complete = latch.await(40, TimeUnit.SECONDS);
            consumer.shutdown();
        }
        System.out.println("{\"event\":\"done\",\"complete\":" + complete + "}");
        System.exit(0);
    }
}
