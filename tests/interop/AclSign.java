// The signature of Java's AclClientRPCHook, with the JDK's own classes: the ext
// fields (and AccessKey) in a TreeMap, their values concatenated, UTF-8, then the
// body; HmacSHA1 keyed with the UTF-8 secret; Base64. Run by tests/test_acl.py as
// `java AclSign.java SECRET BODY_HEX KEY VALUE [KEY VALUE ...]`; prints the signature.
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public class AclSign {
    public static void main(String[] args) throws Exception {
        String secret = args[0];
        byte[] body = new byte[args[1].length() / 2];
        for (int i = 0; i < body.length; i++) {
            body[i] = (byte) Integer.parseInt(args[1].substring(2 * i, 2 * i + 2), 16);
        }
        TreeMap<String, String> fields = new TreeMap<>();
        for (int i = 2; i + 1 < args.length; i += 2) {
            fields.put(args[i], args[i + 1]);
        }
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, String> e : fields.entrySet()) {
            if (!"Signature".equals(e.getKey())) {
                sb.append(e.getValue());
            }
        }
        byte[] text = sb.toString().getBytes(StandardCharsets.UTF_8);
        byte[] total = new byte[text.length + body.length];
        System.arraycopy(text, 0, total, 0, text.length);
        System.arraycopy(body, 0, total, text.length, body.length);
        Mac mac = Mac.getInstance("HmacSHA1");
        mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA1"));
        System.out.println(Base64.getEncoder().encodeToString(mac.doFinal(total)));
    }
}
