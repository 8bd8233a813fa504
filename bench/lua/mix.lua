-- 90% listPets (the path given on the command line), 10% createPet.
local post, get
function init()
  local headers = {}
  for name, value in pairs(wrk.headers) do headers[name] = value end
  headers["Content-Type"] = "application/json"
  post = wrk.format("POST", "/v1/pets", headers, '{"name":"Rex","categoryId":7}')
  get = wrk.format("GET", wrk.path)
  math.randomseed(os.time())
end
function request()
  if math.random() < 0.1 then return post end
  return get
end
