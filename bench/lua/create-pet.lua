-- createPet with the body the README quotes.
wrk.method = "POST"
wrk.body = '{"name":"Rex","categoryId":7}'
wrk.headers["Content-Type"] = "application/json"
