-- wrk: POST /v1/runs of the three-step `set` workflow, waiting for it to finish.
-- The key comes from the environment (STEPWRIGHT_API_KEY).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("STEPWRIGHT_API_KEY") or "")
wrk.body = '{"workflow":"three","input":{"n":1},"wait_seconds":10}'

function response(status, headers, body)
  if status ~= 201 then
    io.stderr:write("unexpected status " .. status .. ": " .. body .. "\n")
  end
end
