package admin

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// openAPI is the OpenAPI 3.1 description of the API, served at
// GET /v1/openapi.json. Tests check it against real answers of every
// endpoint (app/openapi_test.go).
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 description of the API.
func OpenAPI() []byte { return openAPI }

// registerOpenAPI mounts GET /v1/openapi.json ahead of the /v1 group, so
// it takes no token: it describes the API's shape, which the README shows
// too, and holds no data; client generators and the console read it
// before they have a token.
func registerOpenAPI(app fiber.Router) {
	app.Get("/v1/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return c.Send(openAPI)
	})
}
