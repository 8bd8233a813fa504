-- listPets on a page after a random stored id between LOW and HIGH (set by the driver): the
-- cursor the service would issue for it (base64url of ":<id>"), so almost every page is one
-- the service has not sent before and reads from the store.
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local function base64url(text)
  local out = {}
  for i = 1, #text, 3 do
    local a, b, c = text:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = 2 + (b and 1 or 0) + (c and 1 or 0)
    for k = 1, chars do
      local index = math.floor(n / 2 ^ (6 * (4 - k))) % 64
      out[#out + 1] = alphabet:sub(index + 1, index + 1)
    end
  end
  return table.concat(out)
end
function init()
  math.randomseed(os.time())
end
function request()
  return wrk.format("GET", wrk.path .. "&cursor=" .. base64url(":" .. math.random(LOW, HIGH)))
end
