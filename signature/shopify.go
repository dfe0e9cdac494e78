package signature

// HeaderShopifyHmac is the header carrying Shopify's signature.
const HeaderShopifyHmac = "X-Shopify-Hmac-Sha256"

// NewShopify returns a verifier of Shopify webhooks: X-Shopify-Hmac-Sha256
// is base64(HMAC-SHA256(secret, body)) keyed with the app's client secret
// (secrets: the current one and, while it is rotated, the old one). Shopify
// signs no timestamp, so replays within the dedup window are answered
// duplicate by the event ID, not refused here.
func NewShopify(secrets []string) (*HMAC, error) {
	return NewHMAC(secrets, HMACOptions{Header: HeaderShopifyHmac, Algorithm: "sha256", Encoding: "base64"})
}

func init() {
	Register(Scheme{
		Name: "shopify",
		// X-Shopify-Webhook-Id is on every webhook and kept on its retries;
		// X-Shopify-Event-Id (kept below) is the same for the webhooks of one
		// event.
		ID: Location{Header: "X-Shopify-Webhook-Id"}, Type: Location{Header: "X-Shopify-Topic"},
		KeepHeaders: []string{"X-Shopify-Shop-Domain", "X-Shopify-API-Version", "X-Shopify-Event-Id", "X-Shopify-Triggered-At"},
		New:         func(p Params) (Verifier, error) { return NewShopify(p.Secrets) },
	})
}
